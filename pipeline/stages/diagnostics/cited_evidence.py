"""The evidence chain: every id a finding cites must resolve, or the stage fails."""

from __future__ import annotations

from npuprof.pipeline.errors import BrokenEvidence


def check_evidence(findings: list[dict], evidence_ids: set[str], alignment_ids: set[str]) -> None:
    """Raise BrokenEvidence naming the first finding whose ids do not all resolve, or that cites
    nothing and states no limitation."""
    for finding in findings:
        missing = [e for e in finding["evidence_ids"] if e not in evidence_ids]
        missing += [a for a in finding["alignment_ids"] if a not in alignment_ids]
        if missing:
            raise BrokenEvidence(
                f"finding {finding['finding_type']} ({finding['claim_id']}) cites unresolvable ids: {missing[:5]}"
            )
        if not finding["evidence_ids"] and not finding["alignment_ids"] and not finding["limitations"]:
            raise BrokenEvidence(f"finding {finding['finding_type']} ({finding['claim_id']}) cites no evidence")
