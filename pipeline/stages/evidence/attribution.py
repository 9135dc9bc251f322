"""Soft attribution of idle windows from the host trace: what the host was doing while the device
sat idle. Labels are candidate causes, never established ones (reference §3.15).

Per window: host coverage (the union of host events over the window, as a share of it), the share
covered by sync / device-to-host markers and by communication markers, and the number of host
threads active. All windows of a rank are measured at once: each host event is paired with the
windows it overlaps (sorted searches), and unions are taken per window with a running maximum.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from npuprof import knowledge
from npuprof.pipeline.errors import BadInput
from npuprof.pipeline.sources.auxiliary import unreadable_note
from npuprof.pipeline.sources.discovery import TRACE_VIEW, RankInput
from npuprof.pipeline.stages.evidence.host_db import has_host_tables, read_db_host_events
from npuprof.pipeline.stages.evidence.host_trace import HostTrace, read_host_events

TOP_HOST_EVENTS = 5
ATTRIBUTION_COLUMNS = [
    "soft_labels",
    "host_coverage",
    "sync_overlap",
    "comm_overlap",
    "host_thread_count",
    "host_events",
]


def read_rank_host_trace(rank: RankInput, span_us: tuple[float, float] | None, enabled: bool):
    """The rank's host events and launch flows over ``span_us`` (its steps), or None; and a status
    for the manifest (ok | no_steps | missing | unreadable | skipped)."""
    if not enabled:
        return None, {"status": "skipped"}
    if span_us is None:
        return None, {"status": "no_steps"}
    trace, reader = rank.supplemental.get(TRACE_VIEW), read_host_events
    if not trace and len(rank.profiler_dbs) == 1 and has_host_tables(rank.profiler_dbs[0]):
        trace, reader = rank.profiler_dbs[0], read_db_host_events  # a db export: the same, as tables
    if not trace:
        return None, {"status": "missing"}
    cap = int(knowledge.load("evidence_rules")["host_trace"]["max_events_per_rank"])
    try:
        host = reader(trace, span_us[0], span_us[1], cap)
    except (BadInput, OSError) as error:  # unreadable, or gone since discovery: an auxiliary input, degraded
        if not isinstance(error, BadInput):
            error = BadInput(trace, f"cannot read it ({error.strerror or error})")
        note = unreadable_note(rank.rank_id, trace, error, "its idle time carries no host causes")
        return None, {"status": "unreadable", "error": error.one_line(), "note": note}
    status = {
        "status": "ok",
        "source": Path(trace).name,
        "host_events": int(len(host.events)),
        "launch_flows": int(len(host.launches)),
        "dropped_at_cap": host.dropped,
        "cap": cap,
        "bytes_read": host.bytes_read,
    }
    return host, status


def attribute_bubbles(bubbles: pd.DataFrame, host: HostTrace | None) -> pd.DataFrame:
    """The rank's bubble windows with soft-attribution columns (None without a host trace)."""
    if host is None or bubbles.empty:
        return bubbles.assign(**{c: None for c in ATTRIBUTION_COLUMNS})
    windows = pd.DataFrame({"start_us": bubbles["start_ns"] / 1000.0, "end_us": bubbles["end_ns"] / 1000.0})
    order = np.argsort(windows["start_us"].to_numpy(), kind="stable")
    labelled = soft_attribution(windows.iloc[order].reset_index(drop=True), host.events)
    labelled.index = bubbles.index[order]
    return pd.concat([bubbles, labelled.reindex(bubbles.index)], axis=1)


def overlap_pairs(windows: pd.DataFrame, host: pd.DataFrame) -> pd.DataFrame:
    """(window, host event) pairs that overlap, with the overlap interval (windows sorted, disjoint)."""
    w_start, w_end = windows["start_us"].to_numpy(), windows["end_us"].to_numpy()
    e_start, e_end = host["start_us"].to_numpy(), host["end_us"].to_numpy()
    first = np.searchsorted(w_end, e_start, side="right")
    last = np.searchsorted(w_start, e_end, side="left")
    count = np.maximum(last - first, 0)
    event = np.repeat(np.arange(len(host)), count)
    window = np.repeat(first, count) + (np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count))
    return pd.DataFrame(
        {
            "window": window,
            "event": event,
            "a": np.maximum(w_start[window], e_start[event]),
            "b": np.minimum(w_end[window], e_end[event]),
        }
    )


def covered_per_window(pairs: pd.DataFrame, window_count: int) -> np.ndarray:
    if pairs.empty:
        return np.zeros(window_count)
    ordered = pairs.sort_values(["window", "a"], kind="stable")
    reach = ordered.groupby("window")["b"].cummax()
    before = reach.groupby(ordered["window"]).shift(1).fillna(-np.inf).to_numpy()
    gain = np.clip(ordered["b"].to_numpy() - np.maximum(ordered["a"].to_numpy(), before), 0.0, None)
    return np.bincount(ordered["window"].to_numpy(), weights=gain, minlength=window_count)


def name_matches(names: pd.Series, exact: list[str], substrings: list[str]) -> np.ndarray:
    lowered = names.str.lower()
    hit = names.isin(exact).to_numpy().copy()
    for text in substrings:
        hit |= lowered.str.contains(text.lower(), regex=False).to_numpy()
    return hit


def soft_attribution(windows: pd.DataFrame, host: pd.DataFrame) -> pd.DataFrame:
    """Per window (rows of ``windows``: start_us, end_us, sorted): ratios, thread count, labels and
    the host events that cover it most."""
    rules = knowledge.load("evidence_rules")["host_trace"]
    duration = (windows["end_us"] - windows["start_us"]).to_numpy()
    # spans of a whole step (ProfilerStep#N) cover every window and say nothing about it
    host = host[~host["name"].str.startswith(tuple(rules["ignore_name_prefixes"]))].reset_index(drop=True)
    pairs = overlap_pairs(windows, host)
    names = host["name"].iloc[pairs["event"].to_numpy()].reset_index(drop=True)
    sync = name_matches(names, rules["sync_names"], rules["sync_substrings"])
    comm = name_matches(names, [], rules["comm_substrings"])
    n = len(windows)
    share = {
        key: covered_per_window(pairs[mask], n) / np.where(duration > 0, duration, 1.0)
        for key, mask in (("host_coverage", np.ones(len(pairs), bool)), ("sync_overlap", sync), ("comm_overlap", comm))
    }
    threads = (
        pairs.assign(tid=host["tid"].iloc[pairs["event"].to_numpy()].to_numpy()).groupby("window")["tid"].nunique()
    )
    thread_count = threads.reindex(np.arange(n), fill_value=0).to_numpy()
    labels = _labels(share["host_coverage"], share["sync_overlap"], share["comm_overlap"], thread_count, rules)
    top = (
        pairs.assign(name=names, covered=pairs["b"] - pairs["a"])
        .sort_values(["window", "covered"], ascending=[True, False], kind="stable")
        .drop_duplicates(["window", "name"])
        .groupby("window")
        .head(TOP_HOST_EVENTS)
        .groupby("window")["name"]
        .agg(";".join)  # a loop over windows that have host events
    )
    return pd.DataFrame(
        {
            "soft_labels": labels,
            "host_coverage": np.minimum(share["host_coverage"], 1.0),
            "sync_overlap": np.minimum(share["sync_overlap"], 1.0),
            "comm_overlap": np.minimum(share["comm_overlap"], 1.0),
            "host_thread_count": thread_count,
            "host_events": top.reindex(np.arange(n)).to_numpy(),
        },
        index=windows.index,
    )


def _labels(coverage, sync, comm, threads, rules: dict) -> np.ndarray:
    """'|'-joined candidate labels per window, in the order of reference §3.15."""
    parts = [
        np.where(sync >= rules["sync_overlap_min"], "possible_sync_or_h2d", ""),
        np.where(comm >= rules["comm_overlap_min"], "possible_comm_wait", ""),
        np.where(coverage < rules["untraced_coverage_max"], "possible_untraced_host_blocking", ""),
    ]
    none_yet = np.char.str_len(np.char.add(np.char.add(parts[0], parts[1]), parts[2])) == 0
    lag = none_yet & (coverage >= rules["launch_lag_coverage_min"])
    parts.append(np.where(lag, "possible_host_launch_lag", ""))
    none_yet &= ~lag
    lock = none_yet & (threads < rules["serialization_threads_max"])
    parts.append(np.where(lock, "possible_python_serialization_or_lock", ""))
    parts.append(np.where(none_yet & ~lock, "insufficient_evidence", ""))
    columns = [pa.array(np.where(part == "", None, part), pa.string()) for part in parts]
    joined = pc.binary_join_element_wise(*columns, "|", null_handling="skip")
    return np.asarray(joined.to_numpy(zero_copy_only=False), dtype=object)
