"""Capture conditions: what a capture is, not a finding (segment and cross_rank measure them): partial_capture,
clock_offset, rank_not_captured, warmup_step."""

from __future__ import annotations

from npuprof.synth.planting import Fault, FaultType, Scenario, register


def _three_steps(chosen: Scenario, fault: Fault) -> str | None:
    return "partial_capture needs at least 3 steps" if chosen.steps < 3 else None


register(
    FaultType(
        "partial_capture",
        (),
        "first and last step cut",
        condition=True,
        check=_three_steps,
    ),
    scenarios=(
        Scenario(
            "partial_capture",
            "dense training whose capture starts and stops inside a step",
            steps=5,
            faults=(Fault("partial_capture"),),
        ),
    ),
)

register(
    FaultType(
        "clock_offset",
        ("ranks", "offset_us"),
        "``offset_us`` added to ``ranks``' clocks",
        condition=True,
    ),
)

register(
    FaultType(
        "rank_not_captured",
        ("ranks",),
        "a capture condition: ``ranks`` are left out of the capture, nothing else changes",
        condition=True,
        uncaptured=True,
    ),
    scenarios=(
        Scenario(
            "uncaptured_peer",
            "the twin of uncaptured_straggler: rank 3 is not in the capture, and computes like the others",
            faults=(Fault("rank_not_captured", ranks=(3,)),),
        ),
    ),
)

register(
    FaultType(
        "warmup_step",
        ("steps", "gap_us"),
        "a capture condition: ``steps``, the first when empty, open with a ``gap_us`` broadcast over data parallel, "
        "as DDP broadcasts its parameters before the first forward; the other steps run without it",
        condition=True,
    ),
    scenarios=(
        Scenario(
            "warmup",
            "dense training, data parallel; the capture's first step opens with a 12 ms broadcast of the "
            "parameters over data parallel (DDP's start-up broadcast), a one-time cost the other steps do not pay",
            faults=(Fault("warmup_step", steps=(0,), gap_us=12_000.0),),
        ),
    ),
)
