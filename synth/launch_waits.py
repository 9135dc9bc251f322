"""Where the host makes the device wait for its launches: before every forward of a serving capture (its
turn between forwards, longer with serving_host_gap), before every compute kernel (a launch-bound host, or
launches made blocking), and in the forwards that ran eager though their graph was captured
(eager_fallback)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from npuprof.synth.planting import Fault, Forward, Scenario
from npuprof.synth.serving import captured_size


def _hitting(scenario: Scenario, kinds: tuple[str, ...], rank: int) -> list[Fault]:
    """The faults of ``kinds`` planted on ``rank`` (a fault without ranks hits every rank)."""
    return [f for f in scenario.faults if f.kind in kinds and (rank in f.ranks or not f.ranks)]


def _fallback_forwards(scenario: Scenario, fault: Fault) -> set[int]:
    """The forwards an eager_fallback ``fault`` runs eager: its ``steps``, else every full-graph decode."""
    return set(fault.steps) or {i for i, forward in enumerate(scenario.forwards) if forward.graph == "full"}


def fallen_back(scenario: Scenario, rank: int) -> set[int]:
    """The forwards of ``rank`` the eager_fallback faults run eager though their graph was captured and
    other forwards replay it."""
    faults = _hitting(scenario, ("eager_fallback",), rank)
    return set().union(*(_fallback_forwards(scenario, fault) for fault in faults))


def forwards_as_run(scenario: Scenario, rank: int) -> list[Forward]:
    """A serving scenario's forwards as ``rank`` runs them: those eager_fallback runs eager on their own
    batch (no graph, no padding); a full graph at the size its graph_padding_waste fault captured (graphs
    only for the powers of its ``factor``), else at the schedule's own."""
    fell_back = fallen_back(scenario, rank)
    padding = _hitting(scenario, ("graph_padding_waste",), rank)
    ran = []
    for ordinal, forward in enumerate(scenario.forwards):
        if ordinal in fell_back:
            forward = replace(forward, graph="eager", graph_tokens=0)
        elif padding and forward.graph == "full":
            forward = replace(forward, graph_tokens=captured_size(forward.tokens, padding[0].factor))
        ran.append(forward)
    return ran


# between a serving capture's forwards: a host that schedules and prepares forward N+1 while the device
# runs forward N (vLLM's async scheduling) leaves the device only the next launch's latency
SERVING_PREP_US = 20.0


def forward_waits(scenario: Scenario, rank: int, firsts: np.ndarray, gap: np.ndarray) -> None:
    """Add to ``gap`` (µs before each event) the host's turn before each forward of a serving capture
    (``firsts``: each forward's first event): SERVING_PREP_US, and what a serving_host_gap fault plants (the
    host readies a forward only after the last one ended)."""
    if not scenario.forwards:
        return
    gap[firsts] += SERVING_PREP_US
    for fault in _hitting(scenario, ("serving_host_gap",), rank):
        gap[firsts] += fault.gap_us


def launch_waits(
    scenario: Scenario, rank: int, step_of: np.ndarray, is_comm: np.ndarray, gap: np.ndarray
) -> np.ndarray:
    """Add to ``gap`` the waits for launches the faults plant on ``rank``'s compute kernels, and return which
    events the device waits for their launch (``starved``: the trace's launch lands just before them)."""
    starved = np.zeros(len(gap), dtype=bool)
    # a launch-bound host, or launches made blocking (ASCEND_LAUNCH_BLOCKING=1, an env_setting fault)
    for fault in _hitting(scenario, ("host_launch_bound", "env_setting"), rank):  # every compute kernel
        starved |= ~is_comm
        gap += np.where(is_comm, 0.0, fault.gap_us)
    for fault in _hitting(scenario, ("eager_fallback",), rank):  # ... in the forwards that run eager
        eager = np.isin(step_of, list(_fallback_forwards(scenario, fault))) & ~is_comm
        starved |= eager
        gap += np.where(eager, fault.gap_us, 0.0)
    return starved
