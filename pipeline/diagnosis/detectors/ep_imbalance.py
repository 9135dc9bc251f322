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
from npuprof.pipeline.diagnosis.context import DiagnosisContext
from npuprof.pipeline.diagnosis.findings import Finding, rule
from npuprof.pipeline.diagnosis.groups import is_ep_collective, members
from npuprof.pipeline.diagnosis.registry import derived_input, detector
from npuprof.pipeline.diagnosis.retiming import at_peer_median, recoverable_ms
from npuprof.pipeline.io import int_ranks

if TYPE_CHECKING:
    from npuprof.pipeline.stages.base import RootContext

EXPERT_OP_TYPE = "GroupedMatmul"


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
    """The grouped expert matmul events of every rank: rank_id, row_idx, input_shapes, duration_ns."""
    columns = ["rank_id", "row_idx", "input_shapes", "duration_ns"]
    if not (ctx.out_dir / schema.NORMALIZED_EVENTS).exists():
        return pd.DataFrame(columns=columns)
    table = ctx.read_table(schema.NORMALIZED_EVENTS, columns=columns[1:], filter=pc.field("type") == EXPERT_OP_TYPE)
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


def _balanced_ms(inputs: DiagnosisContext, rank: int, group: list[int]) -> float:
    """ms per step saved with the hot rank's work before each EP collective at its peers' median (the
    tokens routed evenly), replayed."""
    ep = inputs.alignment[is_ep_collective(inputs.alignment) & inputs.alignment["rank_id"].isin(group)]
    return recoverable_ms(inputs.step_model, at_peer_median(inputs.step_model, rank, ep["alignment_id"].unique()))


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
    notes=("ep_imbalance", "reduced_work"),
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
        for rank, value in working[working >= hot_spec["token_ratio_min"] * base].items():
            wait_ms, waited = _ep_wait_ms(inputs, int(rank), group)
            findings.append(
                Finding(
                    "ep_load_imbalance_suspected",
                    "cross_rank",
                    [int(rank)],
                    _expert_rows(inputs, int(rank)) + waited,
                    {
                        "name": f"{measure}_over_group_median",
                        "value": value / base,
                        "threshold": hot_spec["token_ratio_min"],
                    },
                    {"rank": int(rank), "tokens": value, "ratio": value / base, "median": base, "wait_ms": wait_ms},
                    limitations=[]
                    if measure == "routed_tokens"
                    else ["no token counts in the shapes: expert time compared"],
                    recoverable_ms_per_step=_balanced_ms(inputs, int(rank), group),
                )
            )
    return findings


def _reduced(rank: int, value: float, median: float, measure: str, spec: dict, evidence: list[str]) -> Finding:
    return Finding(
        "reduced_work_or_dummy_rank",
        "rank",
        [rank],
        evidence,
        {"name": f"{measure}_over_group_median", "value": value / median, "threshold": spec["work_ratio_max"]},
        {"rank": rank, "ratio": value / median, "tokens": value, "median": median},
        limitations=[] if evidence else ["the rank has no expert operator rows to cite"],
        recoverable_ms_per_step=0.0,  # a rank doing less work does not lengthen the step: capacity, not time
    )
