"""The step ledger: every millisecond of each rank's step on exactly one line, and each line explained.

The lines come from step_time_accounting (summarize) and the idle causes (evidence): compute by the
block it ran in, compute hidden under communication, exposed communication by role, kind and part
(transfer / wait / idle), idle by its host cause (or, without a host trace, by what each gap is: a
wait for the pipeline's neighbour, dispatch gaps, the rest by window). They add up to the step's wall
(a "not accounted" line takes any difference). Each finding is then credited with the ms its own
replay removes from each line (savings.py, ledger_credit.py; its ``ledger:`` rule in its detector's
``knowledge/detectors/<topic>/rules.yaml`` names the lines it may land on), and the rest of each line
keeps its own reason: the finding whose cause makes it (``cause:``, not recoverable from this
capture), else an expected reason (``knowledge/ledger_rules.yaml``), else "unexplained"."""

from __future__ import annotations

import fnmatch

import numpy as np
import pandas as pd

from npuprof import knowledge
from npuprof.pipeline.stages.diagnostics.ledger_credit import analytic_demand, line_parts, line_table, place
from npuprof.pipeline.stages.diagnostics.savings import UNKNOWN_ROLE
from npuprof.pipeline.summaries.gap_kinds import IDLE_BY_GAP, idle_gap_names

UNEXPLAINED = "unexplained"
EXPECTED = "expected:"
CAUSE = "cause:"  # the finding whose cause makes these ms, which the capture cannot show recovered
LEDGER_KEYS = ["rank_id", "step_ordinal", "step_id", "complete", "wall_ms"]


def collective_words(component: str) -> str:
    """A "<role> <kind> ..." component as people read it: a collective of no named group reads
    "allreduce idle (group unknown)", not "unknown allreduce idle"."""
    role, _, rest = component.partition(" ")
    return f"{rest} (group unknown)" if role == UNKNOWN_ROLE and rest else component


# each category's lines come from the first of these splits of step_time_accounting that covers a step
SOURCES = {
    "compute": ("compute_by_block",),
    "communication": ("comm_exposed_parts",),
    "idle": ("idle_by_cause", IDLE_BY_GAP),  # by host cause where a trace names it, else by what each gap is
}


def _uncovered(rows: pd.DataFrame, parts: list[pd.DataFrame], category: str) -> pd.DataFrame:
    """The ``rows`` of the steps no earlier part of ``category`` covers."""
    covered = [p.loc[p["category"] == category, ["rank_id", "step_ordinal"]] for p in parts]
    covered = pd.concat(covered, ignore_index=True).drop_duplicates() if covered else pd.DataFrame()
    if not len(covered) or not len(rows):
        return rows
    merged = rows.merge(covered.assign(_covered=True), on=["rank_id", "step_ordinal"], how="left")
    return merged[merged["_covered"].isna()].drop(columns="_covered")


def _unattributed(component: pd.Series) -> pd.Series:
    """idle_by_gap components as ledger lines read them: a pipeline wait, dispatch gaps and the idle
    between forwards are what they are; a long gap named only by its window is an unattributed one."""
    between = knowledge.load("summary_rules")["idle_between_forwards"]
    named = {idle_gap_names()["pipeline"], idle_gap_names()["dispatch"], between}
    text = component.astype(str)
    return text.where(text.isin(named), "unattributed " + text)


def ledger_lines(accounting: pd.DataFrame, idle_causes: pd.DataFrame) -> pd.DataFrame:
    """Per rank and step, the ledger's lines (category, line, ms, share) adding up to ``wall_ms``.

    ``accounting``: step_time_accounting rows of every rank (rank_id, step_ordinal, step_id, complete,
    wall_ms, breakdown, category, component, ms); ``idle_causes``: the idle_by_cause rows, same shape.
    A category whose split is missing for a step (an older output, a rank without a host trace) keeps
    its primary rows as lines."""
    if not len(accounting):
        return pd.DataFrame(columns=[*LEDGER_KEYS, "category", "line", "ms", "share"])
    names = knowledge.load("ledger_rules")["lines"]
    rows = pd.concat([accounting, idle_causes], ignore_index=True) if len(idle_causes) else accounting
    primary = rows[rows["breakdown"] == "primary"]
    parts = [primary[primary["category"] == "overlap"].assign(line=names["overlap"])]
    for category, breakdowns in SOURCES.items():
        whole = primary[primary["category"] == category]
        for breakdown in breakdowns:  # the first split that covers a step gives its lines
            split = rows[(rows["breakdown"] == breakdown) & (rows["category"] == category)]
            split = _uncovered(split, parts, category)
            if breakdown == IDLE_BY_GAP:  # no host trace names a cause: a long gap is named by its window
                split = split.assign(component=_unattributed(split["component"]))
            if len(split):
                parts.append(split.assign(line=[names[category].format(component=c) for c in split["component"]]))
        unsplit = _uncovered(whole, parts, category)  # a step no split covers keeps its primary rows
        if category == "idle":  # without the host trace the idle has no cause: its window names it
            unsplit = unsplit.assign(component="unattributed " + unsplit["component"].astype(str))
        if len(unsplit):
            parts.append(unsplit.assign(line=[names[category].format(component=c) for c in unsplit["component"]]))
    lines = pd.concat(parts, ignore_index=True)
    lines = lines.groupby([*LEDGER_KEYS, "category", "line"], as_index=False, sort=False, dropna=False)["ms"].sum()
    residual = _residual(lines, names["residual"])
    lines = pd.concat([lines, residual], ignore_index=True) if len(residual) else lines
    lines = lines[lines["ms"].abs() > 1e-9]
    lines = lines.assign(
        share=np.where(lines["wall_ms"] > 0, lines["ms"] / lines["wall_ms"].where(lines["wall_ms"] > 0, 1), 0)
    )
    return lines.sort_values(["rank_id", "step_ordinal", "ms"], ascending=[True, True, False]).reset_index(drop=True)


def _residual(lines: pd.DataFrame, name: str) -> pd.DataFrame:
    """A line per step whose lines miss its wall by more than rounding (a µs): the difference."""
    total = lines.groupby(LEDGER_KEYS, as_index=False, dropna=False)["ms"].sum()
    total["ms"] = total["wall_ms"] - total["ms"]
    return total[total["ms"].abs() > 1e-3].assign(category="residual", line=name)


def explain(lines: pd.DataFrame, findings: list[dict], savings: dict[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    """``lines`` with explained_by (claim id, ``cause:<claim id>``, expected:<reason> or unexplained),
    finding_type and blamed_ranks (the ranks the explaining finding names, ';'-joined).

    A finding is credited with the ms its own replay removes from each line (``savings``: its
    replay_savings by claim id; a finding priced another way, its estimate on each of its ranks' steps),
    placed by ledger_credit: a line it shortens splits into the finding's part and the rest, and on
    each rank the ms credited to a finding add up to what its replay saves there. The rest of a line
    keeps its own reason: the likely cause the capture cannot recover (``cause:``: members missing from
    the capture), else an expected reason, else unexplained."""
    savings = savings or {}
    table = line_table(lines)
    by_claim = {f["claim_id"]: f for f in findings}
    credits: list[tuple[np.ndarray, pd.Series]] = []
    for finding in _crediting(findings):
        eligible = eligible_lines(lines, finding)
        demand = savings.get(finding["claim_id"])
        if demand is None:
            demand = analytic_demand(table, eligible, finding["rank_ids"], finding["recoverable_ms_per_step"])
        placed = place(table, demand, eligible)
        placed = placed[placed > 1e-9]
        if len(placed):
            credits.append((finding["claim_id"], placed))
    rest = lines["ms"] - sum((placed.reindex(lines.index, fill_value=0.0) for _, placed in credits), 0.0)
    remainder = lines.assign(ms=rest.to_numpy(), **_reasons(lines, findings))
    remainder = remainder[(remainder["ms"].abs() > 1e-9) | (lines["ms"].abs() <= 1e-9)]
    parts = [remainder]
    for claim, placed in credits:
        finding = by_claim[claim]
        parts.append(
            lines.loc[placed.index].assign(
                ms=placed.to_numpy(),
                explained_by=claim,
                finding_type=finding["finding_type"],
                blamed_ranks=";".join(map(str, finding["rank_ids"])),
            )
        )
    explained = pd.concat(parts, ignore_index=True)
    explained["share"] = np.where(
        explained["wall_ms"] > 0, explained["ms"] / explained["wall_ms"].where(explained["wall_ms"] > 0, 1), 0.0
    )
    order = ["rank_id", "step_ordinal", "ms"]
    return explained.sort_values(order, ascending=[True, True, False], kind="stable").reset_index(drop=True)


def _crediting(findings: list[dict]) -> list[dict]:
    """The findings that take ledger credit, most recoverable first: priced above zero, recoverable from
    this capture, and no symptom of a likely cause among the findings (the cause's replay takes it)."""
    present = {f["claim_id"] for f in findings}
    chosen = [
        f
        for f in findings
        if (f.get("recoverable_ms_per_step") or 0.0) > 0
        and not not_recoverable(f)
        and not {c["claim_id"] for c in f.get("likely_causes", [])} & present
    ]
    return sorted(chosen, key=lambda f: -f["recoverable_ms_per_step"])


def not_recoverable(finding: dict) -> bool:
    """Is this finding a cause whose fix lies outside the capture (rules ``not_recoverable``: members of a
    group the capture lacks)? It names the lines it causes and recovers none of them."""
    return bool(_finding_rule(finding["finding_type"]).get("not_recoverable"))


def _finding_rule(finding_type: str) -> dict:
    diagnosis = knowledge.load("diagnosis_rules")
    return diagnosis["findings"].get(finding_type) or diagnosis["annotations"].get(finding_type) or {}


def eligible_lines(lines: pd.DataFrame, finding: dict) -> np.ndarray:
    """The lines a finding's rules name (``ledger:``): its patterns for its own ranks' lines, and for the
    other ranks' lines (peers wait for its ranks at their collectives)."""
    spec = _finding_rule(finding["finding_type"]).get("ledger") or {}
    own = np.isin(lines["rank_id"].to_numpy(), finding["rank_ids"])
    patterns = {
        side: [p.format_map(finding.get("metrics", {})) for p in spec.get(side, [])] for side in ("own", "peers")
    }
    return (own & _matches(lines["line"], patterns["own"])) | (~own & _matches(lines["line"], patterns["peers"]))


def caused_lines(lines: pd.DataFrame, finding: dict) -> np.ndarray:
    """The lines of a finding's own ranks whose ms its cause makes (rules ``ledger.causes``; all its own
    lines for a cause the capture cannot recover): what it is not credited with of them is still its."""
    spec = _finding_rule(finding["finding_type"]).get("ledger") or {}
    patterns = spec.get("causes", spec.get("own", []) if not_recoverable(finding) else [])
    own = np.isin(lines["rank_id"].to_numpy(), finding["rank_ids"])
    return own & _matches(lines["line"], [p.format_map(finding.get("metrics", {})) for p in patterns])


def _reasons(lines: pd.DataFrame, findings: list[dict]) -> dict[str, np.ndarray]:
    """What explains each line's ms no finding is credited with: the finding whose cause makes it
    (``caused_lines``: its saving, if any, is credited, the rest is not recoverable from this capture),
    else the first expected reason that matches, else unexplained."""
    explained = pd.Series(UNEXPLAINED, index=lines.index, dtype=object)
    finding_type = pd.Series(None, index=lines.index, dtype=object)
    blamed = pd.Series(None, index=lines.index, dtype=object)
    for entry in reversed(knowledge.load("ledger_rules")["expected"]):  # the first match wins
        explained[_matches(lines["line"], [entry["match"]])] = EXPECTED + entry["reason"]
    causes = sorted(findings, key=lambda f: f.get("recoverable_ms_per_step") or f.get("caused_ms_per_step") or 0.0)
    root = _root_causes(findings)  # a symptom's lines are its likely cause's (a launch-bound rank's, the setting's)
    for finding in causes:  # the greatest cause last, so it wins a line two name
        chosen = caused_lines(lines, finding)
        explained[chosen] = CAUSE + root[finding["claim_id"]]["claim_id"]
        finding_type[chosen] = root[finding["claim_id"]]["finding_type"]
        blamed[chosen] = ";".join(map(str, finding["rank_ids"]))
    return {
        "explained_by": explained.to_numpy(),
        "finding_type": finding_type.to_numpy(),
        "blamed_ranks": blamed.to_numpy(),
    }


def _root_causes(findings: list[dict]) -> dict[str, dict]:
    """Each finding's root cause: following ``likely_causes`` (link_causes: a throttled clock explains the
    slow rank) to a finding that names none, or back to itself on a loop."""
    by_claim = {f["claim_id"]: f for f in findings}
    roots = {}
    for finding in findings:
        seen, current = {finding["claim_id"]}, finding
        while True:
            causes = [c["claim_id"] for c in current.get("likely_causes", []) if c["claim_id"] in by_claim]
            if not causes or causes[0] in seen:
                break
            seen.add(causes[0])
            current = by_claim[causes[0]]
        roots[finding["claim_id"]] = current
    return roots


def _matches(line: pd.Series, patterns: list[str]) -> np.ndarray:
    """Which of the lines match one of the patterns (matched once per distinct line: a long capture
    has many steps but a few dozen line names)."""
    names = pd.unique(line)
    hits = [name for name in names if any(fnmatch.fnmatchcase(name, p) for p in patterns)]
    return line.isin(hits).to_numpy()


def step_ledger(
    lines: pd.DataFrame,
    findings: list[dict],
    savings: dict[str, pd.DataFrame] | None = None,
    alignment: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The ledger of every rank and step: its lines (``ledger_lines``), each explained (``explain``:
    ``savings`` by claim id); with ``alignment`` (collective_alignment), a wait no finding explains is
    blamed on the member its rank waited for."""
    ledger = explain(lines, findings, savings)
    return ledger if alignment is None or not len(alignment) else blame_waits(ledger, last_arrivers(alignment))


def last_arrivers(alignment: pd.DataFrame) -> pd.DataFrame:
    """Per rank, step, role and kind: the member that rank waited for most (step_id, rank_id, role,
    kind, blamed_rank) — at each collective instance it waited in, the member that arrived last
    (who waited for nobody), weighted by how long it waited."""
    rows = alignment.dropna(subset=["late_by_us"])
    last = rows.loc[rows.groupby("alignment_id")["late_by_us"].idxmin(), ["alignment_id", "rank_id"]]
    waited = rows[rows["late_by_us"] > 0].merge(last.rename(columns={"rank_id": "blamed_rank"}), on="alignment_id")
    waited = waited.assign(role=waited["parallel_role"].fillna("unknown").astype(str))
    keys = ["step_id", "rank_id", "role", "kind"]
    weight = waited.groupby([*keys, "blamed_rank"], as_index=False)["late_by_us"].sum()
    return weight.sort_values("late_by_us").drop_duplicates(keys, keep="last")[[*keys, "blamed_rank"]]


def blame_waits(ledger: pd.DataFrame, arrivers: pd.DataFrame) -> pd.DataFrame:
    """Unexplained communication wait and idle lines, blamed (``blamed_ranks``) on the member their
    rank waited for most in that step, role and kind."""
    waiting = (ledger["explained_by"] == UNEXPLAINED) & ledger["line"].str.match(r"communication .* (wait|idle)$")
    if not waiting.any() or not len(arrivers):
        return ledger
    lines = pd.concat([ledger.loc[waiting, ["step_id", "rank_id"]], line_parts(ledger.loc[waiting, "line"])], axis=1)
    keys = ["step_id", "rank_id", "role", "kind"]
    found = lines.reset_index().merge(arrivers, on=keys, how="left").set_index("index")["blamed_rank"].dropna()
    blamed = ledger["blamed_ranks"].astype(object)
    blamed[found.index] = found.astype("int64").astype(str)
    return ledger.assign(blamed_ranks=blamed)


def unexplained_share(ledger: pd.DataFrame) -> pd.Series:
    """Per rank: the share of its complete steps' wall that no finding or expected reason explains."""
    complete = ledger[ledger["complete"].astype(bool)]
    if not len(complete):
        return pd.Series(dtype=float)
    walls = complete.drop_duplicates(["rank_id", "step_ordinal"]).groupby("rank_id")["wall_ms"].sum()
    loose = complete[complete["explained_by"] == UNEXPLAINED].groupby("rank_id")["ms"].sum()
    return (loose.reindex(walls.index, fill_value=0.0) / walls.where(walls > 0, 1)).rename("unexplained_share")
