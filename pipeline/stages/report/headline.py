"""The biggest costs of the step, in words: what every output leads with, findings or not.

From the step time accounting (whose primary rows add up to each step's wall): compute, exposed
communication by parallel role and kind ('PP send_recv'), compute overlapping communication, and
device idle by anatomy window. Per rank, the mean over its complete steps (all steps where none is
complete); ranks whose top costs are the same items are told together, ranks that differ apart.
A rank whose kernels the capture does not hold is told from its profiler's step_trace_time.csv.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof.pipeline.stages.diagnostics.ledger import UNKNOWN_ROLE

TOP_COSTS = 3
MAX_GROUPS = 8  # rank groups spelled out; the rest are counted


def cost_items(accounting: pd.DataFrame) -> pd.DataFrame:
    """Per rank and step: cost key, words, ms and the step's wall (the items add up to the wall)."""
    columns = ["rank_id", "step_ordinal", "complete", "wall_ms", "cost", "label", "ms"]
    if accounting.empty:
        return pd.DataFrame(columns=columns)
    primary = accounting[accounting["breakdown"] == "primary"]
    keys = ["rank_id", "step_ordinal", "complete", "wall_ms"]
    compute = primary[primary["category"] == "compute"].groupby(keys, as_index=False)["ms"].sum()
    compute = compute.assign(cost="compute", label="compute")
    comm = accounting[accounting["breakdown"] == "comm_by_role_kind"]
    # a collective whose group the capture does not say reads "allreduce (group unknown)", not "unknown allreduce"
    unnamed = comm["component"].str.startswith(UNKNOWN_ROLE + " ")
    words = comm["component"].where(~unnamed, comm["component"].str.removeprefix(UNKNOWN_ROLE + " "))
    label = "exposed " + words + " communication" + unnamed.map({True: " (group unknown)", False: ""})
    comm = comm.assign(cost="exposed " + comm["component"], label=label)
    overlap = primary[primary["category"] == "overlap"]
    overlap = overlap.assign(cost="overlap", label="compute overlapping communication")
    idle = primary[primary["category"] == "idle"]
    idle = idle.assign(cost="idle " + idle["component"], label="device idle (" + idle["component"] + ")")
    items = pd.concat([compute, comm, overlap, idle], ignore_index=True)
    return items[columns]


def _per_rank(items: pd.DataFrame) -> pd.DataFrame:
    """Mean ms per step of each cost on each rank, over its complete steps (or all, without any)."""
    has_complete = items.groupby("rank_id")["complete"].transform("any")
    used = items[items["complete"].astype(bool) | ~has_complete.astype(bool)]
    steps = used.groupby("rank_id")["step_ordinal"].nunique()
    walls = used.drop_duplicates(["rank_id", "step_ordinal"]).groupby("rank_id")["wall_ms"].mean()
    sums = used.groupby(["rank_id", "cost", "label"], as_index=False)["ms"].sum()
    sums["ms"] = sums["ms"] / sums["rank_id"].map(steps)
    sums["wall_ms"] = sums["rank_id"].map(walls)
    sums["steps"] = sums["rank_id"].map(steps)
    sums["complete_only"] = sums["rank_id"].map(used.groupby("rank_id")["complete"].all())
    return sums.sort_values(["rank_id", "ms"], ascending=[True, False], kind="stable")


STEP_TRACE = "step_trace_time.csv"
STEP_TRACE_COSTS = (
    ("compute_ms", "compute"),
    ("exposed_comm_ms", "exposed communication"),
    ("overlap_ms", "compute overlapping communication"),
    ("idle_ms", "device idle"),
)


def _step_trace_per_rank(step_trace: pd.DataFrame, ranks: set[int]) -> pd.DataFrame:
    """The same per-rank means from the profiler's step_trace_time.csv, for ``ranks`` (those without
    device events); their cost keys say the source, so they never merge with kernel-read ranks."""
    frame = step_trace[step_trace["rank_id"].isin(ranks)] if len(step_trace) else step_trace
    if frame.empty:
        return pd.DataFrame()
    columns, labels = [c for c, _ in STEP_TRACE_COSTS], [label for _, label in STEP_TRACE_COSTS]
    means = frame.groupby("rank_id")[[*columns, "wall_ms"]].mean()
    steps = frame.groupby("rank_id")["step_id"].nunique()
    costs = len(STEP_TRACE_COSTS)  # a row per rank and cost, rank by rank: thousands of ranks at once
    rows = pd.DataFrame(
        {
            "rank_id": np.repeat(means.index.to_numpy().astype(int), costs),
            "cost": [f"{STEP_TRACE}: {label}" for label in labels] * len(means),
            "label": [f"{label} ({STEP_TRACE})" for label in labels] * len(means),
            "ms": means[columns].to_numpy(float).ravel(),
            "wall_ms": np.repeat(means["wall_ms"].to_numpy(float), costs),
            "steps": np.repeat(steps.reindex(means.index).to_numpy().astype(int), costs),
            "complete_only": True,
        }
    )
    return rows.sort_values(["rank_id", "ms"], ascending=[True, False], kind="stable")


def _who(ranks: list[int], all_ranks: int) -> str:
    if len(ranks) == all_ranks and all_ranks > 1:
        return f"all {all_ranks} ranks"
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def _group_text(who: str, wall_ms: float, costs: list[dict], source: str) -> str:
    suffix = f" ({STEP_TRACE})"
    parts = [f"{c['ms_per_step']:.1f} ms ({c['share']:.0%}) {c['label'].removesuffix(suffix)}" for c in costs]
    who = f"{who} (from {STEP_TRACE})" if source == STEP_TRACE else who
    return f"{who}: of a {wall_ms:.1f} ms step, " + "; ".join(parts)


def headline_costs(accounting: pd.DataFrame, rank_ids: list[int], step_trace: pd.DataFrame | None = None) -> dict:
    """The top costs of the step per group of ranks that share them, with ms per step and share of
    the step wall, and one sentence per group; ``rank_ids``: every rank of the root. A rank without
    device events is told from its ``step_trace`` rows (step_trace_time.csv, so labelled) where it
    has them, else named as not covered."""
    per_rank = _per_rank(cost_items(accounting))
    kernel_ranks = set(per_rank["rank_id"].astype(int)) if len(per_rank) else set()
    from_trace = _step_trace_per_rank(
        step_trace if step_trace is not None else pd.DataFrame(), set(rank_ids) - kernel_ranks
    )
    per_rank = pd.concat([per_rank, from_trace], ignore_index=True) if len(from_trace) else per_rank
    if per_rank.empty:
        return {"groups": [], "text": [], "ranks_without_accounting": sorted(rank_ids)}
    top = per_rank.groupby("rank_id").head(TOP_COSTS)
    signature = top.groupby("rank_id")["cost"].agg(tuple)
    covered = sorted(int(r) for r in signature.index)
    groups = []
    for key, members in signature.groupby(signature, sort=False):  # a loop over distinct top-cost lists
        ranks = sorted(int(r) for r in members.index)
        mine = top[top["rank_id"].isin(ranks)]
        wall = float(mine.drop_duplicates("rank_id")["wall_ms"].median())
        costs = []
        for cost in key:  # TOP_COSTS items
            rows = mine[mine["cost"] == cost]
            ms = float(rows["ms"].median())
            costs.append(
                {
                    "cost": cost,
                    "label": str(rows["label"].iloc[0]),
                    "ms_per_step": round(ms, 3),
                    "share": round(ms / wall, 4) if wall > 0 else None,
                    "ms_range": [round(float(rows["ms"].min()), 3), round(float(rows["ms"].max()), 3)],
                }
            )
        source = STEP_TRACE if key[0].startswith(STEP_TRACE) else "kernels"
        groups.append({"ranks": ranks, "wall_ms": round(wall, 3), "costs": costs, "source": source})
    groups.sort(key=lambda g: g["ranks"][0])
    text = [
        _group_text(_who(g["ranks"], len(covered)), g["wall_ms"], g["costs"], g["source"]) for g in groups[:MAX_GROUPS]
    ]
    if len(groups) > MAX_GROUPS:
        text.append(f"... and {len(groups) - MAX_GROUPS} more rank groups (analysis_summary.json headline)")
    missing = sorted(set(rank_ids) - set(covered))
    if missing:
        text.append(f"{_who(missing, 0)}: no device events and no {STEP_TRACE}, not in this breakdown")
    complete = bool(per_rank["complete_only"].all())
    basis = "complete steps" if complete else "all steps (some ranks have no complete step)"
    return {"basis": f"mean per step over {basis}", "groups": groups, "text": text, "ranks_without_accounting": missing}


def top_cost(headline: dict, prefix: str = "top_cost", skip_compute: bool = False) -> dict:
    """The single largest cost over the groups (for one-line views such as the sweep rollup); with
    ``skip_compute`` the largest time the device is not computing (exposed communication or idle)."""
    best = max(
        (
            (c, g)
            for g in headline.get("groups", [])
            for c in g["costs"]
            if not (skip_compute and c["cost"] == "compute")
        ),
        key=lambda pair: pair[0]["ms_per_step"],
        default=None,
    )
    if best is None:
        return {prefix: None, f"{prefix}_ms_per_step": np.nan, f"{prefix}_share": np.nan, f"{prefix}_ranks": None}
    cost, group = best
    return {
        prefix: cost["label"],
        f"{prefix}_ms_per_step": cost["ms_per_step"],
        f"{prefix}_share": cost["share"],
        f"{prefix}_ranks": ";".join(map(str, group["ranks"])),
    }
