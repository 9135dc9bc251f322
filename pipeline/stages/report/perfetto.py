"""report/trace.json: one Chrome-trace / Perfetto file for every rank.

Numeric µs timestamps rebased to the capture start (the vendor's string ``ts`` breaks Perfetto),
each rank's clock corrected by its estimated offset so collectives line up, one process per rank,
one thread per device stream, steps and layers as spans on their own rows, idle windows as spans,
and findings as instant events on their evidence windows. Kernels are capped per rank (the cap is
stated in the trace's metadata); everything is built column-wise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from npuprof.pipeline.io import json_text
from npuprof.pipeline.jsonlines import jsonl_bytes

MAX_KERNELS_PER_RANK = 200_000
STEP_ROW, LAYER_ROW, IDLE_ROW, PP_ROW = 1_000_000, 1_000_001, 1_000_002, 1_000_003  # threads beside the streams
SEPARATOR = ",\n"
NO_STREAMS = pd.DataFrame(columns=["rank_id", "stream_id"])


def rebased_us(ns: pd.Series, rank: pd.Series, offsets_ns: dict[int, float], base_ns: int) -> np.ndarray:
    """ns timestamps as µs since ``base_ns`` on the common clock (each rank minus its offset)."""
    table = pd.Series(offsets_ns, dtype="float64")
    shift = rank.astype("int64").map(table).fillna(0.0).to_numpy(np.float64)
    return ((ns.to_numpy(np.int64) - base_ns) - shift) / 1000.0


def _metadata(ranks: list[int], streams: pd.DataFrame) -> list[dict]:
    events = []
    for rank in ranks:  # a loop over ranks and their few streams
        events.append({"ph": "M", "name": "process_name", "pid": rank, "args": {"name": f"rank {rank}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": rank, "args": {"sort_index": rank}})
        rows = [(STEP_ROW, "steps"), (PP_ROW, "pp schedule"), (LAYER_ROW, "layers"), (IDLE_ROW, "idle windows")]
        rows += [(int(s), f"stream {int(s)}") for s in streams[streams["rank_id"] == rank]["stream_id"].dropna()]
        for order, (tid, label) in enumerate(rows):
            events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": label}})
            events.append(
                {"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": tid, "args": {"sort_index": order}}
            )
    return events


def _spans(frame: pd.DataFrame, tid: int, names: pd.Series, category: str, offsets, base_ns) -> bytes:
    start = rebased_us(frame["start_ns"], frame["rank_id"], offsets, base_ns)
    end = rebased_us(frame["end_ns"], frame["rank_id"], offsets, base_ns)
    record = {
        "ph": "X",
        "name": names,
        "cat": category,
        "pid": frame["rank_id"].to_numpy(np.int64),
        "tid": np.full(len(frame), tid, dtype=np.int64)
        if tid >= 0
        else frame["stream_id"].fillna(-1).to_numpy(np.int64),
        "ts": np.round(start, 3),
        "dur": np.round(np.maximum(end - start, 0.0), 3),
    }
    return jsonl_bytes(record, len(frame), SEPARATOR)


def _findings(findings: list[dict], evidence: pd.DataFrame, offsets, base_ns: int) -> list[dict]:
    if evidence.empty:
        return []
    cited_ids = {e for finding in findings for e in finding["evidence_ids"]}
    by_id = evidence[evidence["evidence_id"].isin(cited_ids)].set_index("evidence_id")  # the few cited rows
    events = []
    for finding in findings:  # a loop over findings (tens)
        cited = [e for e in finding["evidence_ids"] if e in by_id.index][:1]
        if not cited:
            continue
        row = by_id.loc[cited[0]]
        rank = int(row["rank_id"])
        ts = (row["start_us"] * 1000.0 - base_ns - offsets.get(rank, 0.0)) / 1000.0
        events.append(
            {
                "ph": "i",
                "s": "p",
                "pid": rank,
                "tid": STEP_ROW,
                "ts": round(float(ts), 3),
                "cat": "finding",
                "name": f"{finding['finding_type']} ({finding['severity']})",
                "args": {"summary": finding["summary"], "claim_id": finding["claim_id"], "evidence_id": cited[0]},
            }
        )
    return events


@dataclass(frozen=True)
class RankSpans:
    """The bulk of a trace, drawn rank by rank as the file is written: a root's kernels and idle
    windows are never held whole. ``streams``: rank_id, stream_id of the drawn kernels, each rank's in
    the order they are first drawn; ``first_ns``: the earliest kernel start (None without kernels);
    ``kernels`` and ``bubbles``: each rank's drawn kernels (capped) and idle windows, in rank order."""

    streams: pd.DataFrame
    first_ns: int | None
    kernels: Callable[[], Iterable[pd.DataFrame]]
    bubbles: Callable[[], Iterable[pd.DataFrame]]


def held_spans(events: pd.DataFrame, bubbles: Callable[[], Iterable[pd.DataFrame]]) -> RankSpans:
    """RankSpans over kernels already in memory (every rank's, capped), with ``bubbles`` by rank."""
    streams = events[["rank_id", "stream_id"]].drop_duplicates() if len(events) else NO_STREAMS
    first_ns = int(events["start_ns"].min()) if len(events) else None
    return RankSpans(streams, first_ns, lambda: [events], bubbles)


def trace_json(
    spans: RankSpans,
    steps: pd.DataFrame,
    layers: pd.DataFrame,
    findings: list[dict],
    evidence: pd.DataFrame,
    offsets_us: dict[str, float],
    passes: pd.DataFrame | None = None,
) -> Iterator[bytes]:
    """The merged trace, as byte chunks in file order, each rendered when the writer asks for it.

    ``spans``: the kernels (rank_id, stream_id, name, start_ns, end_ns) and idle windows by rank;
    ``evidence``: the evidence_index rows the findings cite; ``passes``: the pipeline-parallel passes
    (report/pp_chart.py ``stage_passes``), spans "F0", "B0", … on a row of their own."""
    offsets = {int(r): float(v) * 1000.0 for r, v in (offsets_us or {}).items()}
    starts = [start for start in (spans.first_ns, steps["start_ns"].min() if len(steps) else None) if start is not None]
    base_ns = int(min(starts)) if starts else 0
    ranks = sorted({int(r) for f in (spans.streams, steps) if len(f) for r in f["rank_id"].unique()})
    head = [*_metadata(ranks, spans.streams), *_findings(findings, evidence, offsets, base_ns)]
    head.append(
        {
            "ph": "M",
            "name": "npuprof",
            "pid": 0,
            "args": {
                "clock": "µs since the earliest event; each rank corrected by its estimated clock offset",
                "kernel_cap_per_rank": MAX_KERNELS_PER_RANK,
            },
        }
    )
    yield b'{"displayTimeUnit": "ms", "traceEvents": [\n'
    bodies = _bodies(spans, steps, layers, passes, offsets, base_ns)
    # every body but the last ends with the separator: the last one's is cut before the array closes
    previous = SEPARATOR.join(json_text(e) for e in head).encode("utf-8") + SEPARATOR.encode()
    for body in bodies:
        if body:
            yield previous
            previous = body
    yield previous.removesuffix(SEPARATOR.encode())
    yield b"\n]}\n"


def _bodies(spans: RankSpans, steps, layers, passes, offsets, base_ns) -> Iterator[bytes]:
    """The span rows of the trace in file order: kernels, steps, layers, idle windows, PP passes."""
    for kernels in spans.kernels():
        if len(kernels):
            yield _spans(kernels, -1, kernels["name"], "kernel", offsets, base_ns)
    if len(steps):
        names = "step " + steps["step_id"].astype("Int64").astype(str).replace("<NA>", "?")
        yield _spans(steps, STEP_ROW, names, "step", offsets, base_ns)
    if len(layers):
        names = "layer " + layers["layer_ordinal"].astype(str)
        yield _spans(layers, LAYER_ROW, names, "layer", offsets, base_ns)
    for bubbles in spans.bubbles():
        if len(bubbles):
            names = "idle " + bubbles["kind"].astype(str) + " " + bubbles["evidence_id"].astype(str)
            yield _spans(bubbles, IDLE_ROW, names, "idle", offsets, base_ns)
    if passes is not None and len(passes):
        names = passes["label"].astype(str) + " (stage " + passes["stage"].astype(str) + ")"
        yield _spans(passes, PP_ROW, names, "pp", offsets, base_ns)
