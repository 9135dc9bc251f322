"""The faults whose findings slow_rank reports (pipeline/stages/diagnostics/detectors/slow_rank.py):
slow_rank_suspected."""

from __future__ import annotations

from npuprof.synth.planting import Fault, FaultType, Scenario, register

register(
    FaultType(
        "slow_rank_suspected",
        ("ranks", "factor"),
        "compute × factor on ``ranks``",
    ),
    scenarios=(
        Scenario(
            "slow_rank",
            "dense training; rank 2 computes 1.6x slower, the others wait for it in every all-reduce",
            faults=(Fault("slow_rank_suspected", ranks=(2,), factor=1.6),),
        ),
    ),
    twins=("slow_rank",),
)
