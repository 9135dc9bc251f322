"""The fault whose finding the graph_padding detector reports
(pipeline/stages/diagnostics/detectors/graph_padding.py): graph_padding_waste."""

from __future__ import annotations

from dataclasses import replace

from npuprof.synth.planting import Fault, FaultType, Scenario, register
from npuprof.synth.serving import BURST_REQUESTS, tp_serving


def _replayed_decodes(scenario: Scenario, fault: Fault) -> str | None:
    if not scenario.forwards or scenario.step_marks:
        return "graph padding is planted in a serving capture without profiler steps"
    if fault.factor < 1.0:
        return "the captured sizes grow by a factor of at least 1"
    if not any(forward.graph == "full" for forward in scenario.forwards):
        return "graph padding needs decode forwards replayed from full graphs"
    return None


register(
    FaultType(
        "graph_padding_waste",
        ("ranks", "factor"),
        "full graphs captured only for the batch sizes that are powers of ``factor`` (1, factor, factor², …) "
        "on ``ranks`` (every rank when empty): each full-graph decode runs its layers padded to the next "
        "such size; its twin captures a graph for every batch size (``factor`` 1, no padding)",
        check=_replayed_decodes,
        twin_replacement=lambda fault: replace(fault, factor=1.0),
    ),
    scenarios=(
        tp_serving(
            "graph_padding_waste",
            "vLLM-Ascend serving of a 16-layer dense model on 2 tensor-parallel ranks, captured without profiler "
            "steps: 12 requests, then "
            "30 and 50 more arrive, so the decode batch grows from 12 to 92 and shrinks back; full graphs were "
            "captured only for powers of 4 (1, 4, 16, 64, 256), so batches of 12, 42, 62 and 92 replay the graphs "
            "of 16, 64, 64 and 256",
            faults=(Fault("graph_padding_waste", factor=4.0),),
            requests=BURST_REQUESTS,
            layers=16,
        ),
    ),
    twins=("graph_padding_waste",),
)
