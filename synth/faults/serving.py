"""The faults whose findings the serving detector reports (pipeline/stages/diagnostics/detectors/serving.py):
serving_host_gap."""

from __future__ import annotations

from npuprof.synth.planting import Fault, FaultType, Scenario, register
from npuprof.synth.serving import tp_serving


def _unmarked_forwards(scenario: Scenario, fault: Fault) -> str | None:
    if not scenario.forwards or scenario.step_marks:
        return "the host's turn between forwards is planted in a serving capture without profiler steps"
    return None


register(
    FaultType(
        "serving_host_gap",
        ("ranks", "gap_us"),
        "``gap_us`` more device idle before every forward on ``ranks`` (every rank when empty): the host "
        "applies the last tokens, schedules and prepares the next batch only after the previous forward "
        "ended (vLLM without async scheduling), and launches its first kernel late",
        check=_unmarked_forwards,
    ),
    scenarios=(
        tp_serving(
            "serving_host_gap",
            "vLLM-Ascend serving on 2 tensor-parallel ranks (the serving scenario's forwards), captured without "
            "profiler steps; the host readies each forward only after the previous one ended, so the device "
            "idles 500 µs more before every forward on both ranks",
            faults=(Fault("serving_host_gap", gap_us=500.0),),
        ),
    ),
    twins=("serving_host_gap",),
)
