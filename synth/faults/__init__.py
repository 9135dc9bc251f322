"""Every fault synth can plant, each registered by its module here as detectors are by theirs: one module
per detector topic (``capture`` for the capture conditions no finding reports), holding its fault types
(``FaultType``: parameters, what it does, its ground truth), the scenarios that plant them and the twins
that price them. Adding a fault type is adding (or extending) its module; a fault that changes a layer's
kernels names the piece it replaces (``piece``) and the layer builders never ask for it by kind.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import replace
from typing import TYPE_CHECKING

from npuprof.synth.planting import (
    _SCENARIOS,
    _TWINS,
    _TYPES,
    RDMA_TIMEOUT_EXPONENT,
    RDMA_TIMEOUT_US,
    STEP_TOP,
    Fault,
    FaultType,
    Scenario,
)

if TYPE_CHECKING:
    from npuprof.synth.kernels import Kernel
    from npuprof.synth.program import Workload

__all__ = [
    "CAPTURE_CONDITIONS",
    "FAULT_PARAMETERS",
    "FAULT_SCENARIOS",
    "FAULT_TWINS",
    "FAULT_TYPES",
    "PLANTABLE_FINDINGS",
    "RDMA_TIMEOUT_EXPONENT",
    "RDMA_TIMEOUT_US",
    "STEP_TOP",
    "UNCAPTURED",
    "Fault",
    "FaultType",
    "Scenario",
    "findings_of_fault",
    "piece",
]


def _load_modules() -> None:
    """Import every fault module; the types each registers take its name as their topic."""
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda found: found.name):
        before = set(_TYPES)
        importlib.import_module(f"{__name__}.{module.name}")
        for kind in set(_TYPES) - before:
            _TYPES[kind] = replace(_TYPES[kind], topic=module.name)


_load_modules()
FAULT_TYPES: dict[str, FaultType] = dict(_TYPES)
# the parameters each kind's ground truth records
FAULT_PARAMETERS: dict[str, tuple[str, ...]] = {kind: t.parameters for kind, t in FAULT_TYPES.items()}
FAULT_SCENARIOS: dict[str, Scenario] = dict(_SCENARIOS)
FAULT_TWINS: tuple[tuple[str, str], ...] = tuple(_TWINS)
CAPTURE_CONDITIONS = tuple(kind for kind, t in FAULT_TYPES.items() if t.condition)
UNCAPTURED = tuple(kind for kind, t in FAULT_TYPES.items() if t.uncaptured)  # faults whose ranks are not written
# every finding type a synthetic root can plant, from the fault types (not a hand list): ground truth
# names the others as findings that must stay silent
PLANTABLE_FINDINGS = tuple(
    sorted(
        {kind for kind, t in FAULT_TYPES.items() if not t.condition}
        | {also for t in FAULT_TYPES.values() for also in (*t.also_reported, *t.also_reported_on_some_ranks)}
    )
)


def findings_of_fault(fault: Fault) -> tuple[str, ...]:
    """The finding types ``fault`` plants (none for a capture condition)."""
    return FAULT_TYPES[fault.kind].findings(fault)


def piece(workload: Workload, name: str, kernels: list[Kernel]) -> list[Kernel]:
    """The kernels that run as the capture model's piece ``name`` on this rank: ``kernels`` (the neutral
    piece), as each fault planted on the rank that replaces that piece changes them."""
    for fault in workload.faults:
        edit = FAULT_TYPES[fault.kind].pieces.get(name)
        if edit is not None:
            kernels = edit(workload, fault, kernels)
    return kernels
