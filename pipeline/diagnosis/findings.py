"""What a finding is, how it is worded from the rules, and its stable claim id."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from npuprof import knowledge


def rule(finding_type: str) -> dict:
    """The thresholds, severity, confidence and wording of one finding type (diagnosis_rules.yaml)."""
    return knowledge.load("diagnosis_rules")["findings"][finding_type]


def evidence_cap() -> int:
    """How many evidence ids one finding cites at most."""
    return int(knowledge.load("diagnosis_rules")["evidence_sample"])


@dataclass
class Finding:
    """One claim, with the statistic that triggered it and the evidence it rests on."""

    finding_type: str
    scope: str  # cross_rank | rank | step | operator | link
    rank_ids: list[int]
    evidence_ids: list[str]
    statistic: dict[str, Any]  # name, value, threshold (and the test, where one is used)
    values: dict[str, Any] = field(default_factory=dict)  # the numbers the sentence is worded from
    alignment_ids: list[str] = field(default_factory=list)
    limitations: list[str] = field(default_factory=list)
    confidence: str | None = None  # the rule's unless the detector knows better

    def to_dict(self) -> dict:
        """The JSON object of diagnosis_findings.json."""
        spec = rule(self.finding_type)
        summary = " ".join(spec["text"].format(**self.values).split())
        ranks = sorted({int(r) for r in self.rank_ids})
        evidence = list(dict.fromkeys(self.evidence_ids))[: evidence_cap()]
        key = "|".join([self.finding_type, self.scope, ",".join(map(str, ranks)), summary])
        return {
            "claim_id": hashlib.sha1(key.encode("utf-8")).hexdigest()[:16],
            "finding_type": self.finding_type,
            "scope": self.scope,
            "summary": summary,
            "severity": spec["severity"],
            "confidence": self.confidence or spec["confidence"],
            "rank_ids": ranks,
            "evidence_ids": evidence,
            "alignment_ids": list(dict.fromkeys(self.alignment_ids))[: evidence_cap()],
            "statistic": _plain(self.statistic),
            "metrics": _plain(self.values),
            "limitations": list(self.limitations),
        }


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    """Numbers as plain Python (JSON) values; floats rounded for reading."""
    out = {}
    for key, value in values.items():
        if hasattr(value, "item"):
            value = value.item()
        out[key] = round(value, 6) if isinstance(value, float) else value
    return out
