"""The step ledger: every millisecond of each rank's step on exactly one line, and each line explained.

The lines come from step_time_accounting (summarize) and the idle causes (evidence): compute by the
block it ran in, compute hidden under communication, exposed communication by role, kind and part
(transfer / wait / idle), idle by its host cause. They add up to the step's wall (a "not accounted"
line takes any difference). Each line is then explained by the finding that recovers the most time
per step among those whose rules name it (each finding's ``ledger:`` in its detector's
``knowledge/detectors/<topic>/rules.yaml``) — on the finding's own ranks, or on their peers, whose
wait at the collectives the named ranks cause — else by an expected reason
(``knowledge/ledger_rules.yaml``), else it is "unexplained".
"""

from __future__ import annotations

import fnmatch

import numpy as np
import pandas as pd

from npuprof import knowledge

UNEXPLAINED = "unexplained"
EXPECTED = "expected:"
LEDGER_KEYS = ["rank_id", "step_ordinal", "step_id", "complete", "wall_ms"]
# the accounting rows each category's lines come from, and the primary rows they re-split
UNKNOWN_ROLE = "unknown"  # the parallel role of a collective whose group the capture does not name


def collective_words(component: str) -> str:
    """A "<role> <kind> ..." component as people read it: a collective of no named group reads
    "allreduce idle (group unknown)", not "unknown allreduce idle"."""
    role, _, rest = component.partition(" ")
    return f"{rest} (group unknown)" if role == UNKNOWN_ROLE and rest else component


SOURCES = {"compute": "compute_by_block", "communication": "comm_exposed_parts", "idle": "idle_by_cause"}


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
    for category, breakdown in SOURCES.items():
        split = rows[(rows["breakdown"] == breakdown) & (rows["category"] == category)]
        whole = primary[primary["category"] == category]
        # a step keeps its primary rows where the split does not cover it
        covered = split[["rank_id", "step_ordinal"]].drop_duplicates().assign(_split=True)
        whole = whole.merge(covered, on=["rank_id", "step_ordinal"], how="left")
        unsplit = whole[whole["_split"].isna()].drop(columns="_split")
        if category == "idle":  # without the host trace the idle has no cause: its window names it
            unsplit = unsplit.assign(component="unattributed " + unsplit["component"].astype(str))
        for frame in (split, unsplit):
            if len(frame):
                parts.append(frame.assign(line=[names[category].format(component=c) for c in frame["component"]]))
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


def explain(lines: pd.DataFrame, findings: list[dict]) -> pd.DataFrame:
    """``lines`` with explained_by (claim id, expected:<reason> or unexplained), finding_type and
    blamed_ranks (the ranks the explaining finding names, ';'-joined)."""
    rules = knowledge.load("ledger_rules")
    diagnosis = knowledge.load("diagnosis_rules")
    explains = {t: entry.get("ledger") for t, entry in {**diagnosis["findings"], **diagnosis["annotations"]}.items()}
    explained = pd.Series(UNEXPLAINED, index=lines.index, dtype=object)
    finding_type = pd.Series(None, index=lines.index, dtype=object)
    blamed = pd.Series(None, index=lines.index, dtype=object)
    for entry in reversed(rules["expected"]):  # the first match wins: later ones are overwritten
        explained[_matches(lines["line"], [entry["match"]])] = EXPECTED + entry["reason"]
    # the most recoverable finding wins a line: apply the least first, so the greatest overwrites
    by_saving = sorted(findings, key=lambda f: f.get("recoverable_ms_per_step") or 0.0)
    root_cause = _root_causes(findings)
    ranks = lines["rank_id"].to_numpy()
    for finding in by_saving:
        spec = explains.get(finding["finding_type"])
        cause = root_cause[finding["claim_id"]]  # one cause, one explanation: the finding's likely cause
        if not spec or (cause is not finding and set(finding["rank_ids"]) <= set(cause["rank_ids"])):
            continue  # a symptom of a cause on the same ranks (a rank late for its dataloader): the cause's lines
        own = np.isin(ranks, finding["rank_ids"])
        patterns = {
            side: [p.format_map(finding.get("metrics", {})) for p in spec.get(side, [])] for side in ("own", "peers")
        }
        chosen = (own & _matches(lines["line"], patterns["own"])) | (~own & _matches(lines["line"], patterns["peers"]))
        explained[chosen] = cause["claim_id"]
        finding_type[chosen] = cause["finding_type"]
        blamed[chosen] = ";".join(map(str, finding["rank_ids"]))
    return lines.assign(
        explained_by=explained.to_numpy(), finding_type=finding_type.to_numpy(), blamed_ranks=blamed.to_numpy()
    )


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


def step_ledger(lines: pd.DataFrame, findings: list[dict], alignment: pd.DataFrame | None = None) -> pd.DataFrame:
    """The ledger of every rank and step: its lines (``ledger_lines``), each explained; with
    ``alignment`` (collective_alignment), a wait no finding explains is blamed on the member its rank
    waited for."""
    ledger = explain(lines, findings)
    return ledger if alignment is None or not len(alignment) else blame_waits(ledger, last_arrivers(alignment))


def line_parts(line: pd.Series) -> pd.DataFrame:
    """role, kind and part of 'communication <role> <kind> <part>' lines (role may hold a space)."""
    tokens = line.str.split(" ")
    return pd.DataFrame(
        {"role": tokens.map(lambda t: " ".join(t[1:-2])), "kind": tokens.str[-2], "part": tokens.str[-1]},
        index=line.index,
    )


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
