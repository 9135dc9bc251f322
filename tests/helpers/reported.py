"""What an analysis reports: its findings and those merged into their cause (one cause, one finding:
``merged_into_cause`` in diagnosis_rules.yaml), each merged one with its type, ranks, evidence and estimate."""

from __future__ import annotations

import json
from pathlib import Path

from npuprof.pipeline import schema


def reported_findings(out: Path) -> list[dict]:
    """The findings of ``out`` and, after each, the ones merged into it (tagged ``merged_into``)."""
    findings = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]
    return [
        item
        for finding in findings
        for item in [finding, *({**m, "merged_into": finding["claim_id"]} for m in finding.get("merged", []))]
    ]
