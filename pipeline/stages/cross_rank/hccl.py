"""The HCCL tables of a root: each communication kind's calls and durations per rank, and how far the
ranks' means spread (rank skew) — read over every rank's communication events, so they are
cross_rank's, beside the alignment of the same collectives."""

from __future__ import annotations

import numpy as np
import pandas as pd


def hccl_op_summary(comm: pd.DataFrame) -> pd.DataFrame:
    """Per (kind, fused, role, rank): calls and duration statistics of the communication ops (µs)."""
    keys = ["kind", "comm_aiv_fused", "parallel_role", "rank_id"]
    grouped = comm.groupby(keys, observed=True, sort=True)
    duration = grouped["duration_us"]
    table = pd.DataFrame(
        {
            "name_count": grouped["name"].nunique(),
            "call_count": duration.size(),
            "duration_sum_us": duration.sum(),
            "duration_avg_us": duration.mean(),
            "duration_min_us": duration.min(),
            "duration_p50_us": duration.quantile(0.5),
            "duration_p90_us": duration.quantile(0.9),
            "duration_max_us": duration.max(),
            "wait_sum_us": grouped["wait_us"].sum(),
        }
    ).reset_index()
    cost = table["duration_sum_us"] + table["wait_sum_us"]
    table["wait_ratio"] = np.where(cost > 0, table["wait_sum_us"] / cost.where(cost > 0, 1.0), 0.0)
    return table


def hccl_class_summary(per_rank: pd.DataFrame) -> pd.DataFrame:
    """Per (kind, fused, role) over ranks: how far the ranks' mean durations spread (rank skew)."""
    keys = ["kind", "comm_aiv_fused", "parallel_role"]
    frame = per_rank.assign(rank_avg=per_rank["duration_sum_us"] / per_rank["call_count"])
    grouped = frame.groupby(keys, observed=True, sort=True)
    table = pd.DataFrame(
        {
            "rank_count": grouped["rank_id"].nunique(),
            "call_count": grouped["call_count"].sum(),
            "duration_sum_us": grouped["duration_sum_us"].sum(),
            "rank_avg_min_us": grouped["rank_avg"].min(),
            "rank_avg_max_us": grouped["rank_avg"].max(),
            "rank_avg_mean_us": grouped["rank_avg"].mean(),
            "duration_max_us": grouped["duration_max_us"].max(),
        }
    ).reset_index()
    mean = table["rank_avg_mean_us"]
    table["rank_skew_ratio"] = np.where(
        mean > 0, (table["rank_avg_max_us"] - table["rank_avg_min_us"]) / mean.where(mean > 0, 1.0), 0.0
    )
    longest = frame.loc[grouped["rank_avg"].idxmax(), keys + ["rank_id"]].rename(columns={"rank_id": "max_avg_rank"})
    shortest = frame.loc[grouped["rank_avg"].idxmin(), keys + ["rank_id"]].rename(columns={"rank_id": "min_avg_rank"})
    return table.merge(longest, on=keys, how="left").merge(shortest, on=keys, how="left")
