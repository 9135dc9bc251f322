"""The names of the causes a device idles for, as every table and text writes them: the evidence stage
splits idle gaps among them (``stages/evidence/idle_causes.py``), the ledger, the detectors and the
report read them. Kept apart from the stage so a later stage reads the names without the stage."""

from __future__ import annotations

from npuprof import knowledge

LAUNCH, QUEUED, UNATTRIBUTED = "launch", "queued", "unattributed"
COPY = "copy"  # the device's own memory copy (MEMCPY_ASYNC): its kernels wait behind it, not for the host


def cause_names() -> list[str]:
    """Every cause, in the order the tables list them: the device's copies, the host classes, then the rest."""
    return [COPY, *knowledge.load("evidence_rules")["idle_causes"]["classes"], LAUNCH, QUEUED, UNATTRIBUTED]


def cause_column(cause: str) -> str:
    """The column of a gap's table holding the µs of ``cause``."""
    return f"{cause}_us"
