"""Detectors as plug-ins: each module of ``pipeline/stages/diagnostics/detectors/`` registers its detectors
and any inputs only it needs; the diagnostics stage runs whatever is registered.

A detector declares the finding types it emits and the inputs it reads (by name, with the columns it
uses). Its topic is its module's name: ``knowledge/detectors/<topic>/`` holds its rules (``rules.yaml``,
the entries of its finding types) and its notes (``*.md``). Adding a detector is adding its module and
its knowledge folder: nothing else lists detectors.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
    from npuprof.pipeline.stages.diagnostics.findings import Finding

DETECTOR_PACKAGE = "npuprof.pipeline.stages.diagnostics.detectors"


@dataclass(frozen=True)
class Detector:
    """One registered detector."""

    name: str  # its function, e.g. ``slow_rank``
    finding_types: tuple[str, ...]
    reads: dict[str, tuple[str, ...]]  # input name → the columns it reads (empty: the input as a whole)
    detect: Callable[["DiagnosisContext"], list["Finding"]]
    # "findings": runs first; "ledger": runs on the step ledger the first findings explain (its
    # ``ledger`` input), and reports what they left unexplained
    phase: str = "findings"

    @property
    def topic(self) -> str:
        """Its module's name: the folder ``knowledge/detectors/<topic>/`` holds its rules and notes."""
        return self.detect.__module__.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class DerivedInput:
    """An input computed from earlier stages' tables for the detectors that declare it."""

    name: str
    load: Callable[[Any], Any]  # (RootContext) -> DataFrame or mapping


_DETECTORS: dict[str, Detector] = {}
_DERIVED: dict[str, DerivedInput] = {}


PHASES = ("findings", "ledger")


def detector(
    *,
    finding_types: tuple[str, ...],
    reads: dict[str, tuple[str, ...]],
    phase: str = "findings",
) -> Callable[[Callable], Callable]:
    """Register the decorated function as a detector (at import of its module)."""
    if phase not in PHASES:
        raise ValueError(f"unknown detector phase {phase!r}; known: {', '.join(PHASES)}")

    def register(function: Callable) -> Callable:
        _DETECTORS[function.__name__] = Detector(function.__name__, finding_types, dict(reads), function, phase)
        return function

    return register


def derived_input(name: str) -> Callable[[Callable], Callable]:
    """Register the decorated function as the loader of input ``name`` (it receives the RootContext)."""

    def register(function: Callable) -> Callable:
        _DERIVED[name] = DerivedInput(name, function)
        return function

    return register


@lru_cache(maxsize=1)
def _import_detector_modules() -> tuple[str, ...]:
    package = importlib.import_module(DETECTOR_PACKAGE)
    names = sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_"))
    for name in names:
        importlib.import_module(f"{DETECTOR_PACKAGE}.{name}")
    return tuple(names)


def detectors() -> tuple[Detector, ...]:
    """Every registered detector, in module order (modules imported on first call)."""
    _import_detector_modules()
    return tuple(sorted(_DETECTORS.values(), key=lambda d: (d.detect.__module__, d.name)))


def derived_inputs() -> dict[str, DerivedInput]:
    """Inputs that detector modules compute for themselves, by name."""
    _import_detector_modules()
    return dict(_DERIVED)


def declared_columns(chosen: tuple[Detector, ...]) -> dict[str, tuple[str, ...] | None]:
    """Per input the union of columns ``chosen`` detectors read (None: some detector reads it whole)."""
    columns: dict[str, set[str] | None] = {}
    for item in chosen:
        for name, cols in item.reads.items():
            if not cols or columns.get(name, set()) is None:
                columns[name] = None
            else:
                columns[name] = (columns.get(name) or set()) | set(cols)
    return {name: None if cols is None else tuple(sorted(cols)) for name, cols in columns.items()}
