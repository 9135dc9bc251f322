"""The faults whose findings collective_wait reports (pipeline/stages/diagnostics/detectors/collective_wait.py):
capture_incomplete_group."""

from __future__ import annotations

from npuprof.synth.planting import Fault, FaultType, Scenario, register


def _left_out(fault: Fault) -> Fault:
    """The twin of an uncaptured straggler: the same ranks left out, computing like the others."""
    return Fault("rank_not_captured", ranks=fault.ranks)


register(
    FaultType(
        "capture_incomplete_group",
        ("ranks", "factor"),
        "``ranks`` compute × factor and are left out of the capture: the captured members of their groups wait for a "
        "rank nobody sees",
        uncaptured=True,
        twin_replacement=_left_out,
    ),
    scenarios=(
        Scenario(
            "uncaptured_straggler",
            "dense training, data parallel; rank 3 computes 1.5x slower and is not in the capture: ranks 0-2 "
            "wait for it in every all-reduce, and only its group's member count says someone is missing",
            faults=(Fault("capture_incomplete_group", ranks=(3,), factor=1.5),),
        ),
    ),
    twins=(
        # the twin of an uncaptured straggler is the same capture of the same ranks, the straggler not slow
        "uncaptured_straggler",
    ),
)
