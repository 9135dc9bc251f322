"""Why the device idled: every idle gap of a step split among its host causes.

Where the device runs a memory copy (``MEMCPY_ASYNC``: a host↔device copy in stream order) inside a gap,
that part is the ``copy``'s, whoever launched what: its kernels wait behind it. Of the rest, a gap whose
next kernel the host had launched before the gap began is the device's own (``queued``:
its work was there, it waited on something else); so is, before a step's first kernel, the stretch
after the host launched it (the launch in flight). In every other gap the host is the cause: the
time its spans of a cause class cover (a blocking sync, the dataloader, garbage collection, memory
allocation; the first class in ``evidence_rules.yaml`` takes time two cover), and the rest is
``launch`` — the host had not launched the next kernel yet — or ``unattributed`` where the trace
holds no launch flow for that kernel. The causes of a gap add up to its length, so per step they
add up to the step's idle time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof import knowledge
from npuprof.pipeline.idle_cause_names import COPY, LAUNCH, QUEUED, UNATTRIBUTED, cause_column, cause_names
from npuprof.pipeline.stages.evidence.attribution import covered_per_window, name_matches, overlap_pairs
from npuprof.pipeline.summaries.gap_kinds import after_previous_forward, head_idle_name


def class_masks(host: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per host class of ``evidence_rules.yaml`` (in order): which host events belong to it (by exact
    name, name substring or process)."""
    classes = knowledge.load("evidence_rules")["idle_causes"]["classes"]
    process = host["process"].astype(object).fillna("").to_numpy()
    return {
        name: name_matches(host["name"], rule["names"], rule["substrings"]) | np.isin(process, rule["processes"])
        for name, rule in classes.items()
    }


def launch_times(kernel_start_us: np.ndarray, launches: pd.DataFrame) -> np.ndarray:
    """The host launch time of each kernel (by start), NaN where no launch flow ends on it."""
    rules = knowledge.load("evidence_rules")["idle_causes"]
    flow_end = launches["device_start_us"].to_numpy(float)
    launch = launches["launch_us"].to_numpy(float)
    if not len(flow_end):
        return np.full(len(kernel_start_us), np.nan)
    at = np.clip(np.searchsorted(flow_end, kernel_start_us), 1, len(flow_end)) - 1
    nearer = np.minimum(at + 1, len(flow_end) - 1)
    at = np.where(np.abs(flow_end[nearer] - kernel_start_us) < np.abs(flow_end[at] - kernel_start_us), nearer, at)
    matched = np.abs(flow_end[at] - kernel_start_us) <= float(rules["launch_match_us"])
    return np.where(matched, launch[at], np.nan)


def gap_causes(
    gaps: pd.DataFrame,
    after_launch_us: np.ndarray,
    host: pd.DataFrame,
    masks: dict[str, np.ndarray],
    copies: pd.DataFrame | None = None,
):
    """Per gap (``gaps``: start_ns, end_ns, in time order, disjoint): the µs of each cause, the
    dominant ``cause`` and its ``cause_share``, and ``launch_lead_us`` (gap start − the next
    kernel's launch; ≥ 0: queued).

    ``after_launch_us``: the host launch of the kernel after each gap (µs, ``launch_times``; NaN:
    no launch flow). ``host``: host events (name, process, start_us, end_us); ``masks``: their host
    classes (``class_masks``); ``copies``: the device's memory copies (start_us, end_us)."""
    # times from the first gap on: µs since the epoch (1.7e15) hold only quarter µs in a float
    base_ns = int(gaps["start_ns"].min()) if len(gaps) else 0
    base_us = base_ns / 1000.0
    start_ns = gaps["start_ns"].to_numpy(np.int64) - base_ns
    duration = (gaps["end_ns"].to_numpy(np.int64) - gaps["start_ns"].to_numpy(np.int64)) / 1000.0
    windows = pd.DataFrame({"start_us": start_ns / 1000.0, "end_us": start_ns / 1000.0 + duration})
    copies = (copies if copies is not None else pd.DataFrame(columns=["start_us", "end_us"]))[["start_us", "end_us"]]
    spans = pd.concat([copies.astype(float), host[["start_us", "end_us"]]], ignore_index=True)
    spans = spans.assign(start_us=spans["start_us"] - base_us, end_us=spans["end_us"] - base_us)
    is_copy = np.arange(len(spans)) < len(copies)
    launch = after_launch_us - base_us
    lead = windows["start_us"].to_numpy(float) - launch  # NaN: no launch flow for the next kernel
    queued = lead >= 0
    host_side = ~queued
    # the copies first, in every gap; then the host classes in priority order, in the host's gaps, each
    # taking what the ones before it left
    copied = np.minimum(covered_per_window(overlap_pairs(windows, spans.loc[is_copy]), len(windows)), duration)
    shares: dict[str, np.ndarray] = {COPY: copied}
    taken = is_copy.copy()
    covered_before = copied
    for name, mask in masks.items():
        taken[len(copies) :] |= mask
        covered = np.minimum(covered_per_window(overlap_pairs(windows, spans.loc[taken]), len(windows)), duration)
        shares[name] = np.where(host_side, covered - covered_before, 0.0)
        covered_before = np.where(host_side, covered, covered_before)
    # before a step's first kernel, the stretch after its launch is the launch in flight (the device's
    # own latency, as in a queued gap): the host's part of that gap ends where it launched
    head = (gaps["window"] == head_idle_name()).to_numpy() if "window" in gaps else np.zeros(len(gaps), bool)
    in_flight = np.where(head & host_side & ~np.isnan(lead), np.clip(windows["end_us"] - launch, 0.0, duration), 0.0)
    in_flight = np.minimum(in_flight, duration - covered_before)
    rest = np.where(host_side, duration - covered_before - in_flight, 0.0)
    shares[LAUNCH] = np.where(np.isnan(lead), 0.0, rest)
    shares[QUEUED] = np.where(queued, duration - copied, in_flight)
    shares[UNATTRIBUTED] = np.where(np.isnan(lead), rest, 0.0)
    frame = pd.DataFrame({cause_column(k): np.clip(v, 0.0, None) for k, v in shares.items()}, index=gaps.index)
    names, microseconds = np.array(list(shares)), frame.to_numpy()
    frame["cause"] = names[np.argmax(microseconds, axis=1)] if len(frame) else np.array([], dtype=object)
    frame["cause_share"] = microseconds.max(axis=1, initial=0.0) / np.where(duration > 0, duration, 1.0)
    frame["launch_lead_us"] = lead
    return frame


def _between_forwards(split: pd.DataFrame, gaps: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """``split`` (µs per cause column of each gap) with the gaps before the forwards of ``steps`` that start
    where the one before ended taken whole into a column of their own (``head_idle_name(steps)``): the
    host's turn between forwards is one ledger line, whatever the host did in it (its causes stay in
    host_idle_gaps, where serving_host_gap names them). Other steps' splits are returned as they are."""
    if not after_previous_forward(steps):
        return split
    head = (gaps["window"] == head_idle_name()).to_numpy() if "window" in gaps else np.zeros(len(gaps), bool)
    whole = split.sum(axis=1).to_numpy()
    split = split.copy()
    split.loc[head] = 0.0
    split[head_idle_name(steps)] = np.where(head, whole, 0.0)
    return split


def idle_by_cause(gaps: pd.DataFrame, causes: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per step and cause (rows in step_time_accounting's shape, breakdown ``idle_by_cause``): the
    ms of the step's idle time with that cause; causes with no time are left out."""
    columns = [cause_column(c) for c in cause_names()]
    split = _between_forwards(causes[columns], gaps, steps)
    per_step = split.groupby(gaps["step_ordinal"].to_numpy()).sum() / 1000.0
    names = dict(zip(columns, cause_names())) | {head_idle_name(steps): head_idle_name(steps)}
    long = per_step.rename(columns=names).stack().rename("ms").reset_index()
    long.columns = ["step_ordinal", "component", "ms"]
    long = long[long["ms"] > 0]
    step_info = steps.set_index("step_ordinal")[["step_id", "complete"]]
    step_info["wall_ms"] = (steps["end_ns"] - steps["start_ns"]).to_numpy(float) / 1e6  # as accounting's
    long = long.join(step_info, on="step_ordinal")
    return pd.DataFrame(
        {
            "step_ordinal": long["step_ordinal"].to_numpy(np.int64),
            "step_id": long["step_id"].to_numpy(),
            "complete": long["complete"].to_numpy(bool),
            "wall_ms": long["wall_ms"].to_numpy(float),
            "breakdown": "idle_by_cause",
            "category": "idle",
            "component": long["component"].to_numpy(object),
            "ms": long["ms"].to_numpy(float),
            "share": (long["ms"] / long["wall_ms"].where(long["wall_ms"] > 0, np.nan)).fillna(0.0).to_numpy(float),
        }
    )


def queued_gap_floor_us(causes: pd.DataFrame) -> float:
    """The device's own gap between kernels it had queued (median, µs): what a launch gap would
    shrink to with the host ahead of the device. 0 where no gap was queued."""
    queued = causes[cause_column(QUEUED)].to_numpy(float)
    queued = queued[queued > 0]
    return float(np.median(queued)) if len(queued) else 0.0


def _within_steps(start_us: np.ndarray, end_us: np.ndarray, steps: pd.DataFrame) -> pd.DataFrame:
    """Spans (µs) that start inside one of the rank's steps: their position, that step's ordinal and the
    span in ns."""
    start_ns = np.round(start_us * 1000).astype(np.int64)
    end_ns = np.round(end_us * 1000).astype(np.int64)
    ordered = steps.sort_values("start_ns")
    first, last = ordered["start_ns"].to_numpy(np.int64), ordered["end_ns"].to_numpy(np.int64)
    at = np.searchsorted(first, start_ns, side="right") - 1
    inside = np.flatnonzero((at >= 0) & (start_ns < last[np.clip(at, 0, None)]))
    return pd.DataFrame(
        {
            "position": inside,
            "step_ordinal": ordered["step_ordinal"].to_numpy(np.int64)[np.clip(at, 0, None)][inside],
            "start_ns": start_ns[inside],
            "end_ns": end_ns[inside],
            "duration_us": (end_ns - start_ns)[inside] / 1000.0,
        }
    )


def device_copies(copies: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """The device's memory copies (HostTrace.copies) that start inside one of the rank's steps, with
    that step's ordinal (DEVICE_COPIES' columns)."""
    spans = _within_steps(copies["start_us"].to_numpy(float), copies["end_us"].to_numpy(float), steps)
    inside = spans.pop("position").to_numpy()
    return spans.assign(
        bytes=copies["bytes"].to_numpy(float)[inside],
        direction=copies["direction"].to_numpy(object)[inside],
        stream_id=copies["stream"].to_numpy(np.int64)[inside],
    )


def hccl_tasks_in_steps(tasks: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """HCCL's data moves (HostTrace.hccl_tasks) that start inside one of the rank's steps, with that
    step's ordinal (HCCL_TASKS' columns)."""
    spans = _within_steps(tasks["start_us"].to_numpy(float), tasks["end_us"].to_numpy(float), steps)
    inside = spans.pop("position").to_numpy()
    chosen = tasks.iloc[inside]
    return spans.assign(
        duration_us=chosen["duration_us"].to_numpy(float),  # as written: the ns of an epoch float are not
        task_type=chosen["task_type"].to_numpy(object),
        plane=chosen["plane"].to_numpy(np.int64),
        transport=chosen["transport"].to_numpy(object),
        link_type=chosen["link_type"].to_numpy(object),
        bytes=chosen["bytes"].to_numpy(float),
    )
