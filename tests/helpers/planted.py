"""A planted fault and the one finding it must produce, read from a scenario's analyzed output."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from npuprof.pipeline import schema


@dataclass(frozen=True)
class Planted:
    """One scenario's ground truth, its planted fault of a type, every finding, and the one of that type."""

    root: Path
    out: Path
    truth: dict
    fault: dict
    findings: list[dict]
    finding: dict


def planted_finding(planted_outputs: dict, scenario: str, finding_type: str) -> Planted:
    """The fault ``scenario`` plants for ``finding_type`` and the single finding of that type it gave."""
    root, out = planted_outputs[scenario]
    truth = json.loads((root / "ground_truth.json").read_text())
    (fault,) = [f for f in truth["faults"] if f["kind"] == finding_type]
    findings = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]
    (finding,) = [f for f in findings if f["finding_type"] == finding_type]
    return Planted(root, out, truth, fault, findings, finding)
