"""Findings of two captures side by side: which appeared, disappeared or changed severity."""

from __future__ import annotations

SEVERITY_ORDER = ("info", "low", "medium", "high", "critical")


def _key(finding: dict) -> tuple:
    return finding.get("finding_type"), finding.get("scope"), tuple(sorted(finding.get("rank_ids") or []))


def _brief(finding: dict) -> dict:
    return {
        "finding_type": finding.get("finding_type"),
        "scope": finding.get("scope"),
        "rank_ids": finding.get("rank_ids"),
        "severity": finding.get("severity"),
        "summary": finding.get("summary"),
        "evidence_ids": (finding.get("evidence_ids") or [])[:4],
        # the same cost told as another type, merged into this one (one cause, one finding)
        "merged": [
            {"finding_type": m.get("finding_type"), "summary": m.get("summary")} for m in finding.get("merged", [])
        ],
    }


def findings_diff(base: list[dict], new: list[dict]) -> dict:
    """{appeared, disappeared, changed_severity, unchanged_count}, keyed by type, scope and ranks."""
    base_by = {_key(f): f for f in base}
    new_by = {_key(f): f for f in new}
    changed = []
    for key in base_by.keys() & new_by.keys():
        before, after = base_by[key].get("severity"), new_by[key].get("severity")
        if before != after:
            changed.append({**_brief(new_by[key]), "severity_before": before, "severity_after": after})
    return {
        "appeared": [_brief(new_by[k]) for k in sorted(new_by.keys() - base_by.keys(), key=str)],
        "disappeared": [_brief(base_by[k]) for k in sorted(base_by.keys() - new_by.keys(), key=str)],
        "changed_severity": sorted(changed, key=lambda f: str(f["finding_type"])),
        "unchanged_count": len(base_by.keys() & new_by.keys()) - len(changed),
    }
