"""What a finding is, how it is worded from the rules, and its stable claim id."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from npuprof import knowledge
from npuprof.pipeline.stages.diagnostics.ledger import eligible_lines
from npuprof.pipeline.stages.diagnostics.ledger_credit import analytic_demand, line_table, place
from npuprof.pipeline.stages.diagnostics.retiming import StepModel, WhatIf, recoverable_ms, summed
from npuprof.pipeline.stages.diagnostics.savings import replay_savings

# a replayed saving below this is none: the step is held by something the fix does not touch (a wait for
# group members the capture lacks, a stream that ends the step later anyway)
NOTHING_SAVED_MS = 0.01


def saves_nothing(finding: dict) -> bool:
    """Does a finding's replay save nothing this capture can show (its limitations say why)?"""
    saved = finding.get("recoverable_ms_per_step")
    return saved is not None and saved < NOTHING_SAVED_MS


def rule(finding_type: str) -> dict:
    """The thresholds, severity, confidence and wording of one finding (or annotation) type
    (diagnosis_rules.yaml)."""
    rules = knowledge.load("diagnosis_rules")
    return rules["findings"].get(finding_type) or rules["annotations"][finding_type]


def priced(model: StepModel, change: WhatIf) -> dict[str, Any]:
    """A finding's ``recoverable_ms_per_step`` and ``what_if`` from one replayed change (keywords for
    ``Finding``)."""
    return {"recoverable_ms_per_step": recoverable_ms(model, change), "what_if": change}


def is_annotation(finding_type: str) -> bool:
    """Does this type qualify evidence (rules ``annotations``) rather than claim a cause?"""
    return finding_type in knowledge.load("diagnosis_rules")["annotations"]


def evidence_cap() -> int:
    """How many evidence ids one finding cites at most."""
    return int(knowledge.load("diagnosis_rules")["evidence_sample"])


@dataclass(kw_only=True)
class Finding:
    """One claim, with the statistic that triggered it and the evidence it rests on (built by keyword:
    six positional lists and dicts in a row are a mistake waiting to happen)."""

    finding_type: str
    scope: str  # cross_rank | rank | step | operator | link
    rank_ids: list[int]
    evidence_ids: list[str]
    statistic: dict[str, Any]  # name, value, threshold (and the test, where one is used)
    values: dict[str, Any] = field(default_factory=dict)  # the numbers the sentence is worded from
    alignment_ids: list[str] = field(default_factory=list)
    limitations: list[str] = field(default_factory=list)
    confidence: str | None = None  # the rule's unless the detector knows better
    # how much shorter the mean step would be without the cause; None where not yet estimated, or where
    # the fix lies outside the capture (rules ``not_recoverable``)
    recoverable_ms_per_step: float | None = None
    # for a cause whose fix lies outside the capture: the ms per step it causes (not a saving)
    caused_ms_per_step: float | None = None
    # the replayed change the estimate comes from (retiming.WhatIf; None: priced another way), kept so
    # every finding's change can be replayed together (recoverable_together); not written out
    what_if: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        """The JSON object of diagnosis_findings.json."""
        spec = rule(self.finding_type)
        summary = sentence(spec["text"], self.values)
        ranks = sorted({int(r) for r in self.rank_ids})
        evidence = list(dict.fromkeys(self.evidence_ids))[: evidence_cap()]
        key = "|".join([self.finding_type, self.scope, ",".join(map(str, ranks)), summary])
        return {
            "claim_id": hashlib.sha1(key.encode("utf-8")).hexdigest()[:16],
            "finding_type": self.finding_type,
            "scope": self.scope,
            "summary": summary,
            "severity": spec.get("severity"),  # annotations have none
            "confidence": self.confidence or spec["confidence"],
            "rank_ids": ranks,
            "evidence_ids": evidence,
            "alignment_ids": list(dict.fromkeys(self.alignment_ids))[: evidence_cap()],
            "statistic": _plain(self.statistic),
            "metrics": _plain(self.values),
            "limitations": list(self.limitations),
            "recoverable_ms_per_step": None
            if self.recoverable_ms_per_step is None
            else round(float(self.recoverable_ms_per_step), 3),
            **({} if self.caused_ms_per_step is None else {"caused_ms_per_step": round(self.caused_ms_per_step, 3)}),
            "likely_causes": [],
            "merged": [],  # findings that told the same cost as another type (merge_symptoms)
        }


def rank_by_cost(findings: list[dict], step_wall_ms: float | None) -> list[dict]:
    """Each finding's share of the mean step (``recoverable_share_of_step``) and the severity that share
    earns (rules ``severity_by_step_share``); the findings most recoverable time first (stable, so
    equal ones keep the rules' order; findings without an estimate last)."""
    cut = knowledge.load("diagnosis_rules")["severity_by_step_share"]
    for finding in findings:
        saved = finding["recoverable_ms_per_step"]
        share = saved / step_wall_ms if saved is not None and step_wall_ms else None
        finding["recoverable_share_of_step"] = None if share is None else round(share, 4)
        if share is not None:
            finding["severity"] = "high" if share >= cut["high"] else "medium" if share >= cut["medium"] else "low"
    return sorted(
        findings, key=lambda f: (f["recoverable_ms_per_step"] is None, -(f["recoverable_ms_per_step"] or 0.0))
    )


def link_causes(findings: list[dict]) -> list[dict]:
    """Name a finding as the likely cause of another on the same rank where the rules say it explains
    that type (``explains: {finding_type: sentence}``) — of the same kernel where both name one: the
    explained finding gains a ``likely_causes`` entry and the sentence at the end of its summary."""
    rules = knowledge.load("diagnosis_rules")["findings"]
    for cause in findings:
        only = cause.get("metrics", {}).get("explains_only")  # a cause that names the one symptom it causes
        for explained_type, template in rules[cause["finding_type"]].get("explains", {}).items():
            if only and explained_type != only:
                continue
            text = sentence(template, cause["metrics"])
            for effect in findings:
                if effect["finding_type"] != explained_type or not set(effect["rank_ids"]) & set(cause["rank_ids"]):
                    continue
                if not _same_kernel(cause, effect):
                    continue
                effect["likely_causes"].append(
                    {"claim_id": cause["claim_id"], "finding_type": cause["finding_type"], "text": text}
                )
                effect["summary"] = f"{effect['summary']}; likely cause: {text}"
    return findings


def _same_kernel(cause: dict, effect: dict) -> bool:
    """Can ``cause`` explain ``effect``: where both name a kernel (metrics ``name``: a narrow launch, a slow
    matmul), only the same kernel's."""
    named = cause.get("metrics", {}).get("name"), effect.get("metrics", {}).get("name")
    return None in named or named[0] == named[1]


MERGED_KEYS = (
    "finding_type",
    "claim_id",
    "summary",
    "rank_ids",
    "evidence_ids",
    "statistic",
    "recoverable_ms_per_step",
)


def merge_symptoms(findings: list[dict]) -> list[dict]:
    """One cause, one finding: a finding of a ``merged_into_cause`` type whose likely cause names all
    its ranks and cites one of its idle windows leaves the list, recorded under the cause's
    ``merged`` (type, claim id, summary, evidence and estimate kept); every other finding is kept."""
    merged_types = set(knowledge.load("diagnosis_rules").get("merged_into_cause", []))
    by_claim = {f["claim_id"]: f for f in findings}
    kept = []
    for finding in findings:
        cause = _merging_cause(finding, by_claim) if finding["finding_type"] in merged_types else None
        if cause is None:
            kept.append(finding)
            continue
        cause["merged"].append({key: finding[key] for key in MERGED_KEYS})
    return kept


def _merging_cause(finding: dict, by_claim: dict[str, dict]) -> dict | None:
    """The likely cause a symptom merges into: on all its ranks, citing one of its idle windows."""
    windows = {e for e in finding["evidence_ids"] if ".bubble" in e}
    for link in finding.get("likely_causes", []):
        cause = by_claim.get(link["claim_id"])
        if (
            cause is not None
            and set(finding["rank_ids"]) <= set(cause["rank_ids"])
            and windows & set(cause["evidence_ids"])
        ):
            return cause
    return None


def sentence(template: str, values: dict[str, Any]) -> str:
    """``template`` (a rule's text) filled with ``values`` as a sentence reads them, on one line: a list as
    '0, 1', and "ranks {ranks}" as "rank 2" for one rank ("ranks 2" before) or "ranks 0, 1"."""
    worded = _worded(values)
    if "ranks" in worded:
        said = str(worded["ranks"])
        worded["ranks"] = ("rank " if len([p for p in said.split(",") if p.strip()]) == 1 else "ranks ") + said
        template = template.replace("rank(s) {ranks}", "{ranks}").replace("ranks {ranks}", "{ranks}")
    return " ".join(template.format(**worded).split())


def _worded(values: dict[str, Any]) -> dict[str, Any]:
    """The values as a sentence reads them: a list of ranks as '0, 1', not '[0, 1]'."""
    return {k: ", ".join(map(str, v)) if isinstance(v, (list, tuple)) else v for k, v in values.items()}


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    """Numbers as plain Python (JSON) values; floats rounded for reading."""
    out = {}
    for key, value in values.items():
        if hasattr(value, "item"):
            value = value.item()
        out[key] = round(value, 6) if isinstance(value, float) else value
    return out


def recoverable_by_rank(model: StepModel, finding: dict, savings: dict[str, pd.DataFrame]) -> dict[str, float]:
    """Per rank, the ms per step fixing the finding's cause saves on that rank's step: its replay's savings
    (savings.replay_savings) over the rank's modelled steps; an estimate priced another way on each of the
    finding's ranks; none for a finding without an estimate."""
    saved = finding.get("recoverable_ms_per_step")
    if saved is None:
        return {}
    placed = savings.get(finding["claim_id"])
    if placed is None:
        return {str(r): round(float(saved), 3) for r in finding["rank_ids"]}
    steps = model.slots.groupby("rank_id").size()
    per_rank = placed.groupby("rank_id")["ms"].sum().reindex(steps.index, fill_value=0.0) / steps
    return {str(int(r)): round(float(ms), 3) for r, ms in per_rank.items() if ms > 0}


def actionable(finding: dict) -> bool:
    """Does fixing this finding's cause save time this capture can show: priced, and its fix inside the
    capture (not a cause its rules call ``not_recoverable``: members of a group the capture lacks)?"""
    return finding.get("recoverable_ms_per_step") is not None and not rule(finding["finding_type"]).get(
        "not_recoverable"
    )


def recoverable_together(
    model: StepModel,
    findings: list[dict],
    changes: dict[str, WhatIf],
    step_wall_ms: float | None,
    lines: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """What fixing every actionable finding at once would save per step: one replay of every replayed
    change (``changes``, by claim id) together — different causes of different work add up — and the
    estimates priced another way (analytic) placed on the ledger ``lines`` that replay left untouched, so
    two findings never count the same ms twice; its share of the mean step (``step_wall_ms``) and the
    plain sum beside it. A finding whose likely cause is among the findings is that cause's symptom (a
    rank slow because its loader stalls): fixing the cause is its fix, so its own change is left out;
    merged symptoms likewise; and findings whose fix lies outside the capture (``actionable``)."""
    claims = [f for f in findings if actionable(f)]
    present = {f["claim_id"] for f in claims}
    causes = [f for f in claims if not {c["claim_id"] for c in f.get("likely_causes", [])} & present]
    replayed = [f for f in causes if f["claim_id"] in changes]
    added = [f for f in causes if f["claim_id"] not in changes]
    joint = summed(model, [changes[f["claim_id"]] for f in replayed]) if replayed else None
    together = recoverable_ms(model, joint) if joint is not None else 0.0
    together += _analytic_on_the_rest(model, [_beside(f, causes) for f in added], joint, lines)
    return {
        "ms_per_step": round(together, 3),
        "share_of_step": round(together / step_wall_ms, 4) if step_wall_ms else None,
        "sum_ms_per_step": round(sum(f["recoverable_ms_per_step"] for f in claims), 3),
        "replayed_claim_ids": [f["claim_id"] for f in replayed],
        "added_claim_ids": [f["claim_id"] for f in added],
        "symptom_claim_ids": [f["claim_id"] for f in claims if f not in causes],
        "not_recoverable_claim_ids": [
            f["claim_id"] for f in findings if f.get("recoverable_ms_per_step") is None and f not in claims
        ],
    }


def _beside(finding: dict, others: list[dict]) -> dict:
    """An analytic estimate as it stands beside the other findings fixed: a finding may say what it saves
    once another type's fix is made (metrics ``recoverable_with``: the pipeline's bubble of balanced
    stages); the smallest such estimate of the types present."""
    present = {f["finding_type"] for f in others if f is not finding}
    beside = [ms for kind, ms in (finding.get("metrics", {}).get("recoverable_with") or {}).items() if kind in present]
    return {**finding, "recoverable_ms_per_step": min(beside)} if beside else finding


def _analytic_on_the_rest(
    model: StepModel, added: list[dict], joint: WhatIf | None, lines: pd.DataFrame | None
) -> float:
    """The ms per step the analytic estimates add to the joint replay: each placed, on each of its ranks'
    steps, on the ledger lines its rules name that the joint replay did not already shorten (the mean over
    the ranks' steps); their plain sum without the ledger lines."""
    if not added:
        return 0.0
    if lines is None or not len(lines):
        return float(sum(f["recoverable_ms_per_step"] for f in added))
    table = line_table(lines)
    if joint is not None and not model.empty:
        place(table, replay_savings(model, joint), np.zeros(len(table), dtype=bool))
    placed = pd.Series(0.0, index=table.index)
    for finding in added:
        eligible = eligible_lines(lines, finding)
        demand = analytic_demand(table, eligible, finding["rank_ids"], finding["recoverable_ms_per_step"])
        placed += place(table, demand, eligible)
    slots = lines[["rank_id", "step_ordinal"]].drop_duplicates()
    per_slot = placed.groupby([lines["rank_id"], lines["step_ordinal"]]).sum()
    return float(per_slot.sum() / len(slots)) if len(slots) else 0.0
