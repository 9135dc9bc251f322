"""evidence: the idle windows of each step, the host activity behind them, and the evidence index.

Map (per rank): the idle gaps of every step that are at least ``bubble_min_us`` long, with the
kernels on both sides; each labelled with candidate host causes from trace_view.json (streamed;
skipped with --no-host-trace); and the rank's evidence index — one row per id a finding can cite
(step and idle windows, operators, communication ops) with its source rows. Reduce: the root's
evidence/bubble_windows.jsonl and evidence_index.csv, written rank by rank.
"""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import pyarrow as pa

from npuprof import knowledge
from npuprof.pipeline import io, schema
from npuprof.pipeline.segmentation.features import ordered_events
from npuprof.pipeline.sources.auxiliary import note_text
from npuprof.pipeline.stages.base import RankContext, RootContext, StageResult
from npuprof.pipeline.stages.rank_reads import layer_spans, rank_steps, step_of_events
from npuprof.pipeline.summaries.accounting import idle_gaps
from npuprof.pipeline.summaries.attribution import attribute_bubbles
from npuprof.pipeline.summaries.evidence import bubble_windows, bubble_windows_jsonl, evidence_index

EVIDENCE_INPUT_COLUMNS = ["row_idx", "start_ns", "end_ns", "name", "source_id"]


def map_rank(ctx: RankContext) -> StageResult:
    """Idle windows with their host labels, and the evidence index, of one rank."""
    events = ordered_events(ctx, EVIDENCE_INPUT_COLUMNS).to_pandas()
    steps = rank_steps(ctx)
    events["step_ordinal"] = step_of_events(len(events), steps)
    bubbles = pd.DataFrame()
    if len(steps):
        min_ns = int(knowledge.load("classify_rules")["bubble_min_us"] * 1000)  # the bubbles classify measures
        bubbles = bubble_windows(ctx.rank.rank_id, events, idle_gaps(events, layer_spans(ctx)), steps, min_ns)
    bubbles, host_trace = attribute_bubbles(ctx.rank, bubbles, ctx.options.host_trace)
    operators = ctx.read_table(schema.OPERATOR_SUMMARY).to_pandas()
    communication = ctx.read_table(schema.COMMUNICATION_EVENTS).to_pandas()
    source_id = events["source_id"].iloc[0] if len(events) else None
    evidence = evidence_index(ctx.rank, source_id, steps, bubbles, operators, communication)
    manifest = {
        "rank_id": ctx.rank.rank_id,
        "bubble_window_count": int(len(bubbles)),
        "host_trace": {k: v for k, v in host_trace.items() if k != "note"},
        "unreadable_inputs": [host_trace["note"]] if "note" in host_trace else [],
    }
    return StageResult(tables={schema.BUBBLE_WINDOWS: bubbles, schema.EVIDENCE_INDEX: evidence}, manifest=manifest)


def reduce_root(ctx: RootContext) -> StageResult:
    """The root's evidence files, and which ranks' idle windows carry host labels."""
    rank_manifests = sorted(ctx.rank_manifests, key=lambda m: m["rank_id"])
    traced = [m["rank_id"] for m in rank_manifests if m["host_trace"].get("status") == "ok"]
    untraced = [m["rank_id"] for m in rank_manifests if m["host_trace"].get("status") in ("missing", "unreadable")]
    unreadable = [note for m in rank_manifests for note in m["unreadable_inputs"]]
    limitations = [note_text(note) for note in unreadable]
    if untraced:
        limitations.append(
            f"ranks {untraced} have no readable trace_view.json: their idle windows carry no host labels"
        )
    manifest = {
        "bubble_window_count": sum(int(m["bubble_window_count"]) for m in rank_manifests),
        "inputs": {
            schema.BUBBLE_WINDOWS.name: "idle gaps of the steps (no event running), at least bubble_min_us long",
            "host labels": "trace_view.json per rank (host events overlapping each idle window)",
            schema.EVIDENCE_INDEX.name: "step segments, idle windows, operator_summary, communication_events",
        },
        "limitations": limitations,
        "unreadable_inputs": unreadable,
        "host_trace": {
            "ranks_attributed": traced,
            "by_rank": {str(m["rank_id"]): m["host_trace"] for m in rank_manifests},
        },
        "rank_summaries": rank_manifests,
    }
    rendered = {
        schema.BUBBLE_WINDOWS_JSONL: _bubble_jsonl_chunks(ctx),
        schema.EVIDENCE_INDEX_CSV.file: _evidence_csv_chunks(ctx),
    }
    return StageResult(rendered=rendered, manifest=manifest)


def _rank_frames(ctx: RootContext, table: schema.Table) -> Iterator[pd.DataFrame]:
    """``table`` one rank at a time (rank order), with its ``rank_id``: the evidence files of a root
    are written rank by rank, never held whole."""
    for rank_id in sorted(int(m["rank_id"]) for m in ctx.rank_manifests):
        part = io.read_dataset(ctx.out_dir, table, rank_id)
        yield part.append_column(schema.RANK_PARTITION_KEY, pa.array([rank_id] * part.num_rows, pa.int32())).to_pandas()


def _bubble_jsonl_chunks(ctx: RootContext) -> Iterator[bytes]:
    """evidence/bubble_windows.jsonl: every rank's idle windows by start time, ranks in order."""
    for bubbles in _rank_frames(ctx, schema.BUBBLE_WINDOWS):
        yield bubble_windows_jsonl(bubbles.sort_values("start_ns", kind="stable"))


def _evidence_csv_chunks(ctx: RootContext) -> Iterator[bytes]:
    """evidence_index.csv, rank by rank (the header once)."""
    header = True
    for frame in _rank_frames(ctx, schema.EVIDENCE_INDEX):
        if frame.empty:
            continue
        yield from io.csv_chunks(schema.join_view(schema.EVIDENCE_INDEX_CSV, [frame]), header=header)
        header = False
    if header:  # no rank has evidence: the declared columns
        yield from io.csv_chunks(pd.DataFrame(columns=list(schema.EVIDENCE_INDEX_CSV.columns)))


def headline(manifest: dict) -> tuple[dict, list[str]]:
    """evidence's part of the result JSON: idle windows found, and what could not be labelled."""
    return {"bubble_window_count": manifest["bubble_window_count"], "limitations": manifest["limitations"]}, []
