"""Operators: every distinct kernel of a rank with its calls, time, wait, evidence rows and what
bounds it; then the same merged over ranks with how much the ranks differ."""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof.pipeline.joined_text import joined_per_key
from npuprof.pipeline.schema import PIPELINE_FIELDS
from npuprof.pipeline.summaries.bound import bound_labels
from npuprof.pipeline.summaries.communication import call_families

OPERATOR_KEYS = ["name", "type", "op_type"]
SAMPLE_ROWS = 5


def operator_summary(events: pd.DataFrame) -> pd.DataFrame:
    """One row per (name, type, op_type) of one rank's events, heaviest first.

    ``events`` needs name, type, op_type, primary_category, categories / roles ('|'-joined),
    duration_ns, wait_ns, stream_id, row_idx, start_ns, end_ns and the pipeline fields.
    """
    frame = events.assign(
        type=events["type"].fillna(""),
        duration_us=events["duration_ns"] / 1000.0,
        wait_us=events["wait_ns"].fillna(0) / 1000.0,
    )
    grouped = frame.groupby(OPERATOR_KEYS, sort=False, dropna=False)
    table = grouped.agg(
        primary_category=("primary_category", "first"),
        categories=("categories", "first"),
        roles=("roles", "first"),
        call_count=("duration_us", "size"),
        duration_sum_us=("duration_us", "sum"),
        wait_sum_us=("wait_us", "sum"),
        stream_count=("stream_id", "nunique"),
        row_start=("row_idx", "min"),
        row_end=("row_idx", "max"),
        first_start_ns=("start_ns", "min"),
        last_end_ns=("end_ns", "max"),
    )
    table["sample_rows"] = _sample_rows(grouped.ngroup().to_numpy(), frame["row_idx"].to_numpy(), len(table))
    sums = grouped[list(PIPELINE_FIELDS)].sum(min_count=1)
    table = table.join(sums.add_suffix("_sum"))
    table = table.reset_index()
    table["duration_avg_us"] = table["duration_sum_us"] / table["call_count"]
    table["first_start_us"] = table.pop("first_start_ns") / 1000.0
    table["last_end_us"] = table.pop("last_end_ns") / 1000.0
    table["total_cost_us"] = table["duration_sum_us"] + table["wait_sum_us"]
    cost = table["total_cost_us"]
    table["wait_ratio"] = np.where(cost > 0, table["wait_sum_us"] / cost.where(cost > 0, 1.0), 0.0)
    stages = table[[f"{f}_sum" for f in PIPELINE_FIELDS]].rename(columns=lambda c: c[: -len("_sum")])
    table = pd.concat([table, bound_labels(table["op_type"], stages)], axis=1)
    table["type"] = table["type"].replace("", None)
    return table.sort_values("duration_sum_us", ascending=False, kind="stable").reset_index(drop=True)


def _sample_rows(group: np.ndarray, rows: np.ndarray, group_count: int) -> np.ndarray:
    """The SAMPLE_ROWS smallest source rows of each group, ';'-joined (groups in ngroup order)."""
    order = np.lexsort((rows, group))
    group, rows = group[order], rows[order]
    rank = np.arange(len(group)) - np.searchsorted(group, group, side="left")
    keep = rank < SAMPLE_ROWS
    return joined_per_key(group[keep], rows[keep], group_count)


def operator_class_summary(per_rank: pd.DataFrame) -> pd.DataFrame:
    """Operators merged over ranks by (name, type, op_type), with the spread of their per-rank time.

    HCCL calls merge by call family (every call has its own name; ``hcom_allReduce__170_*`` is that
    kind in that group). A kernel that runs on several core types (MatMulV3 on aic and mix_cv) keeps a
    row per core type and carries its total over them (``all_cores_duration_sum_us``, ``core_split``).
    """
    pipeline_sums = [f"{f}_sum" for f in PIPELINE_FIELDS]
    frame = per_rank.assign(type=per_rank["type"].fillna(""), name=call_families(per_rank["name"]))
    by_rank = frame.groupby([*OPERATOR_KEYS, "rank_id"], sort=False, dropna=False)
    frame = by_rank[["call_count", "duration_sum_us", "wait_sum_us", *pipeline_sums]].sum(min_count=1)
    frame = frame.join(by_rank["primary_category"].first()).reset_index()
    grouped = frame.groupby(OPERATOR_KEYS, sort=False, dropna=False)
    table = grouped.agg(
        primary_category=("primary_category", "first"),
        rank_count=("rank_id", "nunique"),
        call_count=("call_count", "sum"),
        duration_sum_us=("duration_sum_us", "sum"),
        wait_sum_us=("wait_sum_us", "sum"),
        rank_duration_min_us=("duration_sum_us", "min"),
        rank_duration_max_us=("duration_sum_us", "max"),
        rank_duration_p50_us=("duration_sum_us", "median"),
        rank_duration_mean_us=("duration_sum_us", "mean"),
    )
    sums = grouped[pipeline_sums].sum(min_count=1)
    table = table.join(sums).reset_index()
    table["duration_avg_us"] = table["duration_sum_us"] / table["call_count"]
    cost = table["duration_sum_us"] + table["wait_sum_us"]
    table["wait_ratio"] = np.where(cost > 0, table["wait_sum_us"] / cost.where(cost > 0, 1.0), 0.0)
    mean = table.pop("rank_duration_mean_us")
    spread = table["rank_duration_max_us"] - table["rank_duration_min_us"]
    table["rank_duration_skew_ratio"] = np.where(mean > 0, spread / mean.where(mean > 0, 1.0), 0.0)
    stages = table[pipeline_sums].rename(columns=lambda c: c[: -len("_sum")])
    table = pd.concat([table, bound_labels(table["op_type"], stages), _all_cores(table)], axis=1)
    table["type"] = table["type"].replace("", None)
    return table.sort_values("duration_sum_us", ascending=False, kind="stable").reset_index(drop=True)


def _all_cores(table: pd.DataFrame) -> pd.DataFrame:
    """Per row, its kernel's time over every core type it ran on, and the split where there are several."""
    kernel = table.groupby(["name", "type"], sort=False, dropna=False)["duration_sum_us"]
    total = kernel.transform("sum")
    cores = kernel.transform("size")
    ordered = table.assign(ms=table["duration_sum_us"] / 1000.0).sort_values("ms", ascending=False, kind="stable")
    parts = ordered["op_type"].astype(str) + " " + ordered["ms"].map("{:.1f} ms".format)
    split = parts.groupby([ordered["name"], ordered["type"]], sort=False, dropna=False).transform("; ".join)
    return pd.DataFrame(
        {"all_cores_duration_sum_us": total, "core_split": split.reindex(table.index).where(cores > 1, None)},
        index=table.index,
    )


def by_kernel_total(operator_classes: pd.DataFrame) -> pd.DataFrame:
    """Operator classes heaviest kernel first (over all its core types), its core-type rows together."""
    total = operator_classes["all_cores_duration_sum_us"].fillna(operator_classes["duration_sum_us"])
    ordered = operator_classes.assign(_total=total)
    ordered = ordered.sort_values(["_total", "duration_sum_us"], ascending=False, kind="stable")
    return ordered.drop(columns="_total")
