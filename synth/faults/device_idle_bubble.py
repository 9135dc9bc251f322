"""The faults whose findings device_idle_bubble reports
(pipeline/stages/diagnostics/detectors/device_idle_bubble.py): device_idle_bubble."""

from __future__ import annotations

from npuprof.synth.planting import Fault, FaultType, Scenario, register

register(
    FaultType(
        "device_idle_bubble",
        ("ranks", "steps", "layer", "gap_us"),
        "``gap_us`` of host idle before ``layer`` on ``steps`` of ``ranks``: the host blocks in a ``.item()``",
        also_reported=("blocking_sync_in_step",),
    ),
    scenarios=(
        Scenario(
            "host_bubble",
            "dense prefill; rank 0 idles 6 ms on the host before layer 2 in steps 11 and 12 (ordinals 1, 2)",
            training=False,
            phase="prefill",
            micro_batches=1,
            faults=(Fault("device_idle_bubble", ranks=(0,), steps=(1, 2), layer=2, gap_us=6000.0),),
        ),
        Scenario(
            "idle_capture",
            "dense prefill on 2 ranks whose steps 10 and 11 (ordinals 0, 1) idle 200 ms on the host before layer 1: "
            "the device is busy a few percent of them, a capture of an idle job (capture health: idle_capture, "
            "those two steps; its twin, without the stall, is a healthy capture)",
            training=False,
            phase="prefill",
            ranks=2,
            micro_batches=1,
            faults=(Fault("device_idle_bubble", ranks=(), steps=(0, 1), layer=1, gap_us=200_000.0),),
        ),
    ),
    twins=("host_bubble",),
)
