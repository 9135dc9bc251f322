"""One row per rank: its steps' wall time, how busy it is, how its time splits, how often it idles."""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof import knowledge

IDLE_PATTERNS = {"prelaunch": "prelaunch_gap_ms", "internal": "internal_bubble_total_ms", "tail": "tail_gap_ms"}
STEP_TRACE_COLUMNS = ("wall_ms", "compute_ms", "overlap_ms", "exposed_comm_ms", "idle_ms")  # what a traced row uses


def rank_summary(
    rank_manifests: list[dict],
    step_classes: pd.DataFrame,
    accounting: pd.DataFrame,
    step_trace: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Rank rollup over complete steps (partial capture steps stay out of statistics); a rank without
    device events takes its walls and shares from its ``step_trace`` rows (step_trace_time.csv)."""
    rules = knowledge.load("summary_rules")["recurring_bubble"]
    rows = []
    traced = step_trace if step_trace is not None and len(step_trace) else pd.DataFrame({"rank_id": []})
    traced_rows = traced.groupby("rank_id").indices  # a root may hold thousands of such ranks: no frame each
    traced_columns = {c: traced[c].to_numpy(float) for c in STEP_TRACE_COLUMNS if c in traced}
    for manifest in sorted(rank_manifests, key=lambda m: m["rank_id"]):  # a loop over ranks
        rank = manifest["rank_id"]
        if not manifest["event_count"] and rank in traced_rows:
            rows.append(_from_step_trace(rank, {c: v[traced_rows[rank]] for c, v in traced_columns.items()}))
            continue
        steps = step_classes[step_classes["rank_id"] == rank] if len(step_classes) else step_classes
        complete = steps[steps["complete"].astype(bool)] if len(steps) else steps
        wall = complete["wall_ms"] if len(complete) else pd.Series(dtype=float)
        row = {
            "rank_id": rank,
            "event_count": manifest["event_count"],
            "step_count": int(len(steps)),
            "complete_step_count": int(len(complete)),
            "wall_ms_mean": wall.mean() if len(wall) else None,
            "wall_ms_p50": float(np.percentile(wall, 50)) if len(wall) else None,
            "wall_ms_p90": float(np.percentile(wall, 90)) if len(wall) else None,
            "wall_ms_max": wall.max() if len(wall) else None,
            "busy_ms_mean": complete["busy_ms"].mean() if len(complete) else None,
            "bubble_share": complete["underfeed_ms"].sum() / wall.sum() if len(wall) and wall.sum() else None,
        }
        row["accounting_source"] = "kernels" if manifest["event_count"] else "none"
        row.update(_time_shares(accounting, rank, wall.sum() if len(wall) else 0.0))
        bubbling = int((complete["bubble_count"] > 0).sum()) if len(complete) else 0
        ratio = bubbling / len(complete) if len(complete) else None
        row.update(
            {
                "bubbling_step_count": bubbling,
                "bubble_recurrence_ratio": ratio,
                "recurring_bubble_pattern": bool(
                    ratio is not None and ratio >= rules["min_ratio"] and len(complete) >= rules["min_steps"]
                ),
                "dominant_idle_pattern": _dominant_idle(complete),
            }
        )
        rows.append(row)
    return pd.DataFrame(rows)


def _from_step_trace(rank: int, traced: dict[str, np.ndarray]) -> dict:
    """A rank's row from its profiler's step split (its rows of ``STEP_TRACE_COLUMNS``): walls and
    shares, no kernel-level columns."""
    wall = traced["wall_ms"]
    total = float(wall.sum())

    def share(column: str) -> float | None:
        return float(traced[column].sum()) / total if total else None

    return {
        "rank_id": rank,
        "event_count": 0,
        "step_count": int(len(wall)),
        "complete_step_count": int(len(wall)),
        "wall_ms_mean": float(wall.mean()),
        "wall_ms_p50": float(np.percentile(wall, 50)),
        "wall_ms_p90": float(np.percentile(wall, 90)),
        "wall_ms_max": float(wall.max()),
        "busy_ms_mean": float((traced["compute_ms"] + traced["overlap_ms"] + traced["exposed_comm_ms"]).mean()),
        "bubble_share": share("idle_ms"),
        "compute_share": share("compute_ms"),
        "communication_share": share("exposed_comm_ms"),
        "overlap_share": share("overlap_ms"),
        "accounting_source": "step_trace_time.csv",
        "bubbling_step_count": None,
        "bubble_recurrence_ratio": None,
        "recurring_bubble_pattern": False,
        "dominant_idle_pattern": None,
    }


def _time_shares(accounting: pd.DataFrame, rank: int, wall_ms: float) -> dict:
    """compute / exposed communication / overlap shares of the rank's complete-step wall time."""
    shares = {"compute_share": None, "communication_share": None, "overlap_share": None}
    if not len(accounting) or not wall_ms:
        return shares
    mine = accounting[
        (accounting["rank_id"] == rank) & (accounting["breakdown"] == "primary") & accounting["complete"].astype(bool)
    ]
    by_category = mine.groupby("category")["ms"].sum()
    for category in ("compute", "communication", "overlap"):
        shares[f"{category}_share"] = float(by_category.get(category, 0.0)) / wall_ms
    return shares


def _dominant_idle(complete: pd.DataFrame) -> str:
    """The idle pattern with the largest mean over complete steps (none when the rank never idles)."""
    if not len(complete):
        return "none"
    means = {name: float(complete[column].fillna(0).mean()) for name, column in IDLE_PATTERNS.items()}
    best = max(means, key=means.get)
    return best if means[best] > 0 else "none"
