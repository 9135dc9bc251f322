"""CANN and framework API calls per rank and step: count, total, p50 and p99 of their durations.

Like the vendor's ``cann_api_sum``, from the host events the evidence stage streams out of
``trace_view.json``: the CANN lane's calls (``AscendCL@…``, ``Node@launch``, …) and the framework's
operators (``aten::…`` on the Python lane). A call belongs to the step its start falls in. Beside
them, the host's time per step in each host class of ``evidence_rules.yaml`` (sync, dataloader, gc,
allocation) whether or not the device idled meanwhile: layer ``activity``, whose total is the union
of the class's spans in the step (nested calls counted once); and the launch-to-start delay of the
step's kernels (layer ``launch``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof.pipeline.stages.evidence.attribution import covered_per_window, overlap_pairs

CANN_PROCESS = "CANN"
FRAMEWORK_PREFIX = "aten::"
COLUMNS = ["step_ordinal", "step_id", "layer", "name", "count", "total_us", "p50_us", "p99_us"]


def host_activity(host: pd.DataFrame, steps: pd.DataFrame, classes: dict[str, np.ndarray]) -> pd.DataFrame:
    """Per step and host class (``classes``: name → which host events belong to it): its events
    starting in the step, the union of their time clipped to the step, p50 and p99 of their durations."""
    base_ns = int(steps["start_ns"].min())
    windows = pd.DataFrame(
        {
            "start_us": (steps["start_ns"].to_numpy(np.int64) - base_ns) / 1000.0,
            "end_us": (steps["end_ns"].to_numpy(np.int64) - base_ns) / 1000.0,
        }
    )
    shifted = host.assign(start_us=host["start_us"] - base_ns / 1000.0, end_us=host["end_us"] - base_ns / 1000.0)
    step_of = np.searchsorted(windows["start_us"].to_numpy(), shifted["start_us"].to_numpy(float), side="right") - 1
    parts = []
    for name, mask in classes.items():  # a loop over the host classes
        events = shifted.loc[mask]
        if events.empty:
            continue
        union = covered_per_window(overlap_pairs(windows, events), len(windows))
        own = pd.DataFrame({"step": step_of[mask], "duration_us": events["duration_us"].to_numpy(float)})
        own = own[own["step"] >= 0].groupby("step")["duration_us"]
        stats = pd.DataFrame({"count": own.size(), "p50_us": own.quantile(0.5), "p99_us": own.quantile(0.99)})
        stats = stats.reindex(np.flatnonzero(union > 0)).fillna({"count": 0})
        parts.append(
            pd.DataFrame(
                {
                    "step_ordinal": steps["step_ordinal"].to_numpy(np.int64)[stats.index],
                    "step_id": steps["step_id"].to_numpy()[stats.index],
                    "layer": "activity",
                    "name": name,
                    "count": stats["count"].to_numpy(np.int64),
                    "total_us": union[stats.index],
                    "p50_us": stats["p50_us"].to_numpy(float),
                    "p99_us": stats["p99_us"].to_numpy(float),
                }
            )
        )
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)


def launch_delays(kernel_start_us: np.ndarray, kernel_step: np.ndarray, launch_us: np.ndarray, steps: pd.DataFrame):
    """Per step: the launch-to-start delay of its kernels (device start − host launch, from the
    launch flows; kernels without one left out) — layer ``launch``, name ``launch_to_start``."""
    known = ~np.isnan(launch_us) & ~np.isnan(kernel_step)
    delays = pd.DataFrame(
        {"step_ordinal": kernel_step[known].astype(np.int64), "delay": (kernel_start_us - launch_us)[known]}
    )
    if delays.empty:
        return pd.DataFrame(columns=COLUMNS)
    grouped = delays.groupby("step_ordinal")["delay"]
    summary = grouped.agg(count="size", total_us="sum")
    summary["p50_us"], summary["p99_us"] = grouped.quantile(0.5), grouped.quantile(0.99)
    summary = summary.reset_index()
    summary.insert(1, "step_id", steps.set_index("step_ordinal")["step_id"].reindex(summary["step_ordinal"]).to_numpy())
    summary.insert(2, "layer", "launch")
    summary.insert(3, "name", "launch_to_start")
    return summary[COLUMNS]


def host_api_summary(host: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per step and API (``host``: name, process, start_us, duration_us; ``steps``: step_ordinal,
    step_id, start_ns, end_ns): layer (cann | framework), name, count, total_us, p50_us, p99_us."""
    process = host["process"].astype(object).fillna("").to_numpy()
    is_cann = process == CANN_PROCESS
    is_framework = ~is_cann & host["name"].str.startswith(FRAMEWORK_PREFIX).to_numpy()
    calls = host.loc[is_cann | is_framework, ["name", "start_us", "duration_us"]]
    layer = np.where(is_cann, "cann", "framework")[is_cann | is_framework]
    # the step of each call: the last step starting at or before it, if the call starts before its end
    starts = steps["start_ns"].to_numpy(np.int64) / 1000.0
    ends = steps["end_ns"].to_numpy(np.int64) / 1000.0
    at = np.searchsorted(starts, calls["start_us"].to_numpy(float), side="right") - 1
    inside = (at >= 0) & (calls["start_us"].to_numpy(float) < ends[np.clip(at, 0, None)])
    frame = pd.DataFrame(
        {
            "step_ordinal": steps["step_ordinal"].to_numpy(np.int64)[at[inside]],
            "layer": layer[inside],
            "name": calls["name"].to_numpy(object)[inside],
            "duration_us": calls["duration_us"].to_numpy(float)[inside],
        }
    )
    if frame.empty:
        return pd.DataFrame(
            columns=["step_ordinal", "step_id", "layer", "name", "count", "total_us", "p50_us", "p99_us"]
        )
    grouped = frame.groupby(["step_ordinal", "layer", "name"], sort=True)["duration_us"]
    summary = grouped.agg(count="size", total_us="sum").reset_index()
    quantiles = grouped.quantile([0.5, 0.99]).unstack()
    summary["p50_us"] = quantiles[0.5].to_numpy()
    summary["p99_us"] = quantiles[0.99].to_numpy()
    summary.insert(1, "step_id", steps.set_index("step_ordinal")["step_id"].reindex(summary["step_ordinal"]).to_numpy())
    return summary.sort_values(["step_ordinal", "total_us"], ascending=[True, False], kind="stable")
