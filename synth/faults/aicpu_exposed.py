"""The faults whose findings aicpu_exposed reports (pipeline/stages/diagnostics/detectors/aicpu_exposed.py):
aicpu_exposed."""

from __future__ import annotations

from npuprof.synth.planting import Fault, FaultType, Scenario, register

register(
    FaultType(
        "aicpu_exposed",
        ("layer", "gap_us"),
        "an AI CPU op of ``gap_us`` before ``layer`` on every step",
    ),
    scenarios=(
        Scenario(
            "exposed_aicpu",
            "dense prefill; an AI CPU op (400 us) runs exposed inside layer 1 on every step",
            training=False,
            phase="prefill",
            micro_batches=1,
            faults=(Fault("aicpu_exposed", layer=1, gap_us=400.0),),
        ),
    ),
    twins=("exposed_aicpu",),
)
