"""ep_load_imbalance_suspected (a hot EP rank) and reduced_work_or_dummy_rank (a rank with ~no expert work).

Routed tokens per rank come from the grouped expert matmul's input shapes, as the vendor's
ep_load_balance reads them: the shape list split on ';', empty parts and the last two (weights,
group list) dropped, the first dims of the rest summed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from npuprof.pipeline import schema
from npuprof.pipeline.io import int_ranks
from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, priced, rule
from npuprof.pipeline.stages.diagnostics.groups import is_ep_collective, members
from npuprof.pipeline.stages.diagnostics.registry import derived_input, detector
from npuprof.pipeline.stages.diagnostics.retiming import WhatIf, scaled_transit, work_rows

if TYPE_CHECKING:
    from npuprof.pipeline.stages.base import RootContext

EXPERT_OP_TYPE = "GroupedMatmul"
PROPORTIONAL = (
    "recoverable time: each expert block on the line of its time over the members' tokens, the exchanges' "
    "transit in proportion to the busiest member's tokens (its fixed latency too), the total tokens unchanged"
)


def _tokens_of_shapes(shapes: str | None) -> float:
    parts = [p for p in str(shapes or "").split(";") if p.strip()]
    total = 0.0
    for part in parts[:-2]:
        first = part.split(",")[0].strip()
        try:
            total += float(first)
        except ValueError:
            return float("nan")
    return total if parts[:-2] else float("nan")


@derived_input("expert_calls")
def expert_calls(ctx: RootContext) -> pd.DataFrame:
    """The grouped expert matmul events of every rank: rank_id, row_idx, input_shapes, start_ns, duration_ns."""
    columns = ["rank_id", "row_idx", "input_shapes", "start_ns", "duration_ns"]
    if not (ctx.out_dir / schema.NORMALIZED_EVENTS).exists():
        return pd.DataFrame(columns=columns)
    is_expert = pc.field("type") == EXPERT_OP_TYPE
    # the ranks whose operators (summarize: one row per name and type of all a rank's events) hold one: the
    # scan of every event's type is skipped on the others, on most roots all of them
    operators = ctx.read_table(schema.OPERATOR_SUMMARY, columns=["type"], filter=is_expert)
    ranks = pc.unique(operators.column(schema.RANK_PARTITION_KEY)).to_pylist()
    found = is_expert & pc.field(schema.RANK_PARTITION_KEY).isin(ranks)
    table = ctx.read_table(schema.NORMALIZED_EVENTS, columns=columns[1:], filter=found)
    return int_ranks(table.to_pandas())


def routed_tokens(expert_calls: pd.DataFrame) -> pd.DataFrame:
    """Per rank: routed tokens (sum over its grouped-matmul calls), expert time and sample rows."""
    if expert_calls.empty:
        return pd.DataFrame(columns=["rank_id", "tokens", "expert_us", "calls"])
    codes, shapes = pd.factorize(expert_calls["input_shapes"].fillna(""))
    per_shape = np.array([_tokens_of_shapes(s) for s in shapes] or [np.nan])  # a loop over distinct shapes
    frame = expert_calls.assign(
        tokens=per_shape[codes] if len(codes) else [], expert_us=expert_calls["duration_ns"] / 1000.0
    )
    return (
        frame.groupby("rank_id")
        .agg(tokens=("tokens", lambda t: t.sum(min_count=1)), expert_us=("expert_us", "sum"), calls=("tokens", "size"))
        .reset_index()
    )


def _ep_groups(inputs: DiagnosisContext, ranks: list[int]) -> list[list[int]]:
    units = inputs.units[inputs.units["alignment_type"] == "collective"]
    units = units[is_ep_collective(units)]
    groups = {tuple(members(m)) for m in units["rank_ids"].drop_duplicates()}
    return [list(g) for g in sorted(groups)] or [ranks]


def _work(per_rank: pd.DataFrame) -> tuple[pd.Series, str]:
    """Tokens where every rank's shapes gave them, else expert time."""
    if per_rank["tokens"].notna().all():
        return per_rank.set_index("rank_id")["tokens"], "routed_tokens"
    return per_rank.set_index("rank_id")["expert_us"], "expert_time_us"


def _ep_wait_ms(inputs: DiagnosisContext, rank: int, group: list[int]) -> tuple[float, list[str]]:
    ep = inputs.alignment[is_ep_collective(inputs.alignment) & inputs.alignment["rank_id"].isin(group)]
    late = ep[ep["arrival_order"] == ep["member_count"] - 1]
    waited = ep[ep["alignment_id"].isin(late[late["rank_id"] == rank]["alignment_id"]) & (ep["rank_id"] != rank)]
    top = waited.sort_values("late_by_us", ascending=False)["evidence_id"].head(4).tolist()
    return float(waited["late_by_us"].sum()) / 1000.0, top


def balanced_routing(inputs: DiagnosisContext, work: pd.Series) -> WhatIf:
    """The step with the group's routed tokens spread evenly, the total unchanged: on each member the
    expert block (its local work before each EP exchange that holds its grouped matmuls — the expert
    compute between a dispatch and its combine, forward and backward) moved along its instance's line of
    time over tokens (a Theil–Sen fit over the members) to the group's mean, and every EP exchange's
    transit scaled by the mean over the busiest member's (an all-to-all ends when the member moving the
    most tokens has moved them)."""
    model = inputs.step_model
    change = WhatIf.none(model)
    group = work.index.tolist()
    calls = inputs.expert_calls[inputs.expert_calls["rank_id"].isin(group)]
    if model.empty or model.rows.empty or calls.empty or work.max() <= 0:
        return change
    _, holder = work_rows(model, pd.DataFrame({"rank_id": calls["rank_id"], "start_us": calls["start_ns"] / 1000.0}))
    ep_ids = inputs.alignment.loc[
        is_ep_collective(inputs.alignment) & inputs.alignment["rank_id"].isin(group), "alignment_id"
    ].unique()
    held = model.rows.loc[np.unique(holder[holder >= 0]), "instance"]
    rows = model.rows[model.rows["instance"].isin(held) & model.rows["alignment_id"].isin(ep_ids)]
    gaps = rows.pivot_table(index="instance", columns="rank_id", values="gap_us", aggfunc="first")
    gaps = gaps.reindex(columns=group)
    x = work.reindex(group).to_numpy(float)
    slope = _theil_sen(gaps.to_numpy(float), x)
    intercept = np.nanmedian(gaps.to_numpy(float) - slope[:, None] * x[None, :], axis=1)
    line = pd.DataFrame({"slope": slope, "intercept": intercept}, index=gaps.index).reindex(rows["instance"])
    own = line["intercept"].to_numpy() + line["slope"].to_numpy() * rows["rank_id"].map(work).to_numpy(float)
    even = line["intercept"].to_numpy() + line["slope"].to_numpy() * work.mean()
    # a member off the line (slow for another reason) keeps its proportion to it
    with np.errstate(all="ignore"):
        ratio = np.where(own > 0, even / own, 1.0)
    change.gap_cut_us[rows.index.to_numpy()] = np.nan_to_num(rows["gap_us"].to_numpy(float) * (1.0 - ratio))
    change.transit_us = scaled_transit(model, pd.Series(work.mean() / work.max(), index=ep_ids)).transit_us
    return change


PAIR_BUDGET = 4_000_000  # member pairs × instances held in memory at once


def _theil_sen(values: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per row of ``values`` (one column per member, at ``x``), the median slope over member pairs with
    different x: robust to a member slow for another reason (a slow rank keeps its own excess)."""
    j, k = np.nonzero(np.triu(x[:, None] != x[None, :], 1))
    slopes = np.full(len(values), np.nan)
    if not len(j):
        return slopes
    dx = x[j] - x[k]
    chunk = max(1, PAIR_BUDGET // len(j))
    for lo in range(0, len(values), chunk):  # chunks bound memory on wide EP groups
        part = values[lo : lo + chunk]
        with np.errstate(all="ignore"):
            slopes[lo : lo + chunk] = np.nanmedian((part[:, j] - part[:, k]) / dx, axis=1)
    return slopes


def _expert_rows(inputs: DiagnosisContext, rank: int) -> list[str]:
    ops = inputs.operators[(inputs.operators["rank_id"] == rank) & (inputs.operators["type"] == EXPERT_OP_TYPE)]
    return ops["evidence_id"].tolist()


@detector(
    finding_types=("ep_load_imbalance_suspected", "reduced_work_or_dummy_rank"),
    reads={
        "expert_calls": (),
        "units": ("alignment_type", "parallel_role", "name", "rank_ids"),
        "alignment": (
            "alignment_id",
            "rank_id",
            "parallel_role",
            "name",
            "arrival_order",
            "member_count",
            "late_by_us",
            "evidence_id",
        ),
        "operators": ("rank_id", "type", "evidence_id"),
        "step_model": (),
    },
)
def ep_findings(inputs: DiagnosisContext) -> list[Finding]:
    """ep_load_imbalance_suspected (a hot EP rank) and reduced_work_or_dummy_rank (a rank with ~no work)."""
    per_rank = routed_tokens(inputs.expert_calls)
    if per_rank.empty:
        return []
    hot_spec, idle_spec = rule("ep_load_imbalance_suspected"), rule("reduced_work_or_dummy_rank")
    work, measure = _work(per_rank)
    findings = []
    for group in _ep_groups(inputs, sorted(work.index.tolist())):  # a loop over EP groups
        values = work.reindex(group).fillna(0.0)  # an EP rank with no expert calls did no expert work
        if len(values) < 2 or values.median() <= 0:
            continue
        median = float(values.median())
        for rank, value in values[values <= idle_spec["work_ratio_max"] * median].items():
            findings.append(
                _reduced(int(rank), float(value), median, measure, idle_spec, _expert_rows(inputs, int(rank)))
            )
        working = values[values > idle_spec["work_ratio_max"] * median]
        base = float(working.median()) if len(working) else median
        hot = working[working >= hot_spec["token_ratio_min"] * base]
        # one what-if for the group: its hot ranks' findings each carry it (the router spreads them together)
        balanced = priced(inputs.step_model, balanced_routing(inputs, values)) if len(hot) else {}
        for rank, value in hot.items():
            wait_ms, waited = _ep_wait_ms(inputs, int(rank), group)
            findings.append(
                Finding(
                    finding_type="ep_load_imbalance_suspected",
                    scope="cross_rank",
                    rank_ids=[int(rank)],
                    evidence_ids=_expert_rows(inputs, int(rank)) + waited,
                    statistic={
                        "name": f"{measure}_over_group_median",
                        "value": value / base,
                        "threshold": hot_spec["token_ratio_min"],
                    },
                    values={
                        "rank": int(rank),
                        "tokens": value,
                        "ratio": value / base,
                        "median": base,
                        "wait_ms": wait_ms,
                    },
                    limitations=[PROPORTIONAL]
                    + ([] if measure == "routed_tokens" else ["no token counts in the shapes: expert time compared"]),
                    **balanced,
                )
            )
    return findings


def _reduced(rank: int, value: float, median: float, measure: str, spec: dict, evidence: list[str]) -> Finding:
    return Finding(
        finding_type="reduced_work_or_dummy_rank",
        scope="rank",
        rank_ids=[rank],
        evidence_ids=evidence,
        statistic={
            "name": f"{measure}_over_group_median",
            "value": value / median,
            "threshold": spec["work_ratio_max"],
        },
        values={"rank": rank, "ratio": value / median, "tokens": value, "median": median},
        limitations=[] if evidence else ["the rank has no expert operator rows to cite"],
        recoverable_ms_per_step=0.0,  # a rank doing less work does not lengthen the step: capacity, not time
    )
