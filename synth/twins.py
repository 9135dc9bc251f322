"""Twins: each planted fault's scenario generated again without that fault (same seed, same shapes).

A finding's ``recoverable_ms_per_step`` claims how much shorter the mean step would be without its
cause; the twin is that step, measured. ``TWINS`` lists the (scenario, finding type) pairs the tests
check and ``bench/twins.py`` tabulates.
"""

from __future__ import annotations

from dataclasses import replace

from npuprof.synth.faults import FAULT_TWINS, FAULT_TYPES
from npuprof.synth.scenarios import SCENARIOS, Scenario

# (scenario, the finding whose fault the twin leaves out: a fault is named by the finding it plants): each
# fault module's (synth/faults/), and those of the scenarios that plant two faults at once, where each
# finding is priced with the other fault still in place
TWINS: tuple[tuple[str, str], ...] = (
    *FAULT_TWINS,
    ("demo", "slow_rank_suspected"),
    ("demo", "device_idle_bubble"),
    ("mixed", "slow_rank_suspected"),
    ("mixed", "ep_load_imbalance_suspected"),
)


def twin_of(name: str, finding_type: str) -> Scenario:
    """Scenario ``name`` without the fault that plants ``finding_type`` (or with what replaces it)."""
    planted = SCENARIOS[name]
    kept = tuple(f for f in planted.faults if f.kind != finding_type)
    if len(kept) != len(planted.faults) - 1:
        raise ValueError(f"scenario {name} plants no single {finding_type} fault")
    removed = [f for f in planted.faults if f.kind == finding_type]
    replacements = [(FAULT_TYPES[f.kind].twin_replacement, f) for f in removed]
    replaced = tuple(replace_with(fault) for replace_with, fault in replacements if replace_with is not None)
    return replace(planted, name=f"{name}_twin", faults=kept + replaced)
