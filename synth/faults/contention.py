"""The faults whose findings contention reports (pipeline/stages/diagnostics/detectors/contention.py):
bandwidth_contention."""

from __future__ import annotations

from npuprof.synth.planting import Fault, FaultType, Scenario, register

register(
    FaultType(
        "bandwidth_contention",
        ("factor",),
        "a collective on the communication stream beside compute transfers factor × as long as it does alone: the "
        "compute takes its share of the memory bandwidth",
    ),
    scenarios=(
        Scenario(
            "contended_buckets",
            "dense training; the gradient buckets' all-reduces that run beside the backward transfer 2.5x as "
            "long as the last one, alone: the backward's kernels take their share of the memory bandwidth",
            faults=(Fault("bandwidth_contention", factor=2.5),),
        ),
    ),
    twins=(
        # the twin's buckets transfer beside the backward as fast as alone
        "contended_buckets",
    ),
)
