"""The faults whose findings slow_link reports (pipeline/stages/diagnostics/detectors/slow_link.py):
slow_link_suspected."""

from __future__ import annotations

from npuprof.synth.planting import Fault, FaultType, Scenario, register

register(
    FaultType(
        "slow_link_suspected",
        ("link", "factor"),
        "bandwidth of ``link`` ÷ factor",
    ),
    scenarios=(
        Scenario(
            "slow_link",
            "dense prefill with TP all-reduces; the 0-1 link runs at a quarter of its bandwidth",
            training=False,
            phase="prefill",
            micro_batches=1,
            faults=(Fault("slow_link_suspected", link=(0, 1), factor=4.0),),
        ),
    ),
    twins=("slow_link",),
)
