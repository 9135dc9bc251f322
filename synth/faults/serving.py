"""The faults whose findings the serving detector reports (pipeline/stages/diagnostics/detectors/serving.py):
serving_host_gap, eager_fallback."""

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


def _full_graph_forwards(scenario: Scenario, fault: Fault) -> str | None:
    if not scenario.forwards or scenario.step_marks:
        return "an eager fallback is planted in a serving capture without profiler steps"
    if any(scenario.forwards[s].graph != "full" for s in fault.steps if s < len(scenario.forwards)):
        return "the forwards that fall back must be full-graph decodes"
    return None


register(
    FaultType(
        "eager_fallback",
        ("ranks", "steps", "gap_us"),
        "the full-graph decode forwards ``steps`` (every one when empty) run eager on ``ranks`` (every rank "
        "when empty), on their own batch, though the graph of their size is captured and replayed by other "
        "forwards: each compute kernel waits ``gap_us`` more for its host launch",
        check=_full_graph_forwards,
        # its forwards' kernels wait for their launches: with a host trace, a launch-bound host whose likely
        # cause it names
        also_reported=("host_launch_bound",),
    ),
    scenarios=(
        tp_serving(
            "eager_fallback",
            "vLLM-Ascend serving on 2 tensor-parallel ranks (the serving scenario's forwards), captured without "
            "profiler steps; 19 of its 30 decodes (forwards 1-5 and 16-19 of 4 requests, 7-11 of 5, 22-26 of 3) "
            "run eager on both ranks though forwards 12, 14, 15 and 30 replay the graphs of their batch, each "
            "kernel launched 5 µs late by the host",
            faults=(
                Fault(
                    "eager_fallback",
                    steps=(1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 16, 17, 18, 19, 22, 23, 24, 25, 26),
                    gap_us=5.0,
                ),
            ),
        ),
    ),
    twins=("eager_fallback",),
)
