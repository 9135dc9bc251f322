"""evidence: the idle windows of each step, the host activity behind them, and the evidence index.

Map (per rank): the idle gaps of every step that are at least ``bubble_min_us`` long, with the
kernels on both sides; each labelled with candidate host causes from trace_view.json (streamed;
skipped with --no-host-trace); and the rank's evidence index — one row per id a finding can cite
(step and idle windows, operators, communication ops) with its source rows. Reduce: the root's
evidence/bubble_windows.jsonl and evidence_index.csv, written rank by rank.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from npuprof import knowledge
from npuprof.pipeline import io, schema
from npuprof.pipeline.idle_cause_names import COPY
from npuprof.pipeline.segmentation.features import ordered_events
from npuprof.pipeline.sources.auxiliary import note_text
from npuprof.pipeline.stages.base import RankContext, RootContext, StageResult
from npuprof.pipeline.stages.evidence.attribution import attribute_bubbles, read_rank_host_trace
from npuprof.pipeline.stages.evidence.host_api import host_activity, host_api_summary, launch_delays
from npuprof.pipeline.stages.evidence.host_trace import HostTrace
from npuprof.pipeline.stages.evidence.idle_causes import (
    QUEUED,
    cause_column,
    class_masks,
    device_copies,
    gap_causes,
    hccl_tasks_in_steps,
    idle_by_cause,
    launch_times,
    queued_gap_floor_us,
)
from npuprof.pipeline.stages.evidence.index import bubble_windows, bubble_windows_jsonl, evidence_index
from npuprof.pipeline.stages.evidence.launch_scopes import scoped_launches
from npuprof.pipeline.stages.rank_reads import layer_spans, rank_steps, step_of_events
from npuprof.pipeline.summaries.accounting import idle_gaps

EVIDENCE_INPUT_COLUMNS = ["row_idx", "start_ns", "end_ns", "name", "source_id"]


def map_rank(ctx: RankContext) -> StageResult:
    """Idle windows with their host labels and causes, idle time by cause, and the evidence index,
    of one rank."""
    events = ordered_events(ctx, EVIDENCE_INPUT_COLUMNS).to_pandas()
    steps = rank_steps(ctx)
    events["step_ordinal"] = step_of_events(len(events), steps)
    gaps = idle_gaps(events, layer_spans(ctx), steps) if len(steps) else pd.DataFrame()
    span = (float(steps["start_ns"].min()) / 1000.0, float(steps["end_ns"].max()) / 1000.0) if len(steps) else None
    host, host_trace = read_rank_host_trace(ctx.rank, span, ctx.options.host_trace)
    bubbles, host_gaps, by_cause = pd.DataFrame(), pd.DataFrame(), pd.DataFrame()
    if len(steps):
        min_ns = int(knowledge.load("classify_rules")["bubble_min_us"] * 1000)  # the bubbles classify measures
        bubbles = bubble_windows(ctx.rank.rank_id, events, gaps, steps, min_ns)
    bubbles = attribute_bubbles(bubbles, host)
    if host is not None:  # once per rank: the host classes of its host events, the launch of each kernel
        masks = class_masks(host.events)
        launch_us = launch_times(events["start_ns"].to_numpy() / 1000.0, host.launches)
    if host is not None and len(gaps):
        bubbles, host_gaps, by_cause, floor_us = _with_causes(events, gaps, steps, bubbles, host, masks, launch_us)
        host_trace["queued_gap_median_us"] = floor_us
    else:
        bubbles = bubbles.assign(cause=None, cause_share=None)
    operators = ctx.read_table(schema.OPERATOR_SUMMARY).to_pandas()
    communication = ctx.read_table(schema.COMMUNICATION_EVENTS).to_pandas()
    source_id = events["source_id"].iloc[0] if len(events) else None
    evidence = evidence_index(ctx.rank, source_id, steps, bubbles, operators, communication)
    manifest = _rank_manifest(ctx.rank.rank_id, len(bubbles), host_trace)
    api = _host_api(events, host, steps, masks, launch_us) if host is not None and len(steps) else pd.DataFrame()
    traced = host is not None and len(steps)
    tables = {
        schema.HOST_API_SUMMARY: api,
        schema.BUBBLE_WINDOWS: bubbles,
        schema.EVIDENCE_INDEX: evidence,
        schema.HOST_IDLE_GAPS: host_gaps,
        schema.DEVICE_COPIES: device_copies(host.copies, steps) if traced else pd.DataFrame(),
        schema.HCCL_TASKS: hccl_tasks_in_steps(host.hccl_tasks, steps) if traced else pd.DataFrame(),
        schema.LAUNCH_SCOPES: scoped_launches(events, launch_us, host.events) if traced else pd.DataFrame(),
        schema.IDLE_BY_CAUSE: by_cause,
    }
    return StageResult(tables=tables, manifest=manifest)


def map_eventless(ctx: RankContext) -> StageResult:
    """map_rank for a rank without device events: no steps, so no idle windows and no host trace read."""
    _, host_trace = read_rank_host_trace(ctx.rank, None, ctx.options.host_trace)
    return StageResult(manifest=_rank_manifest(ctx.rank.rank_id, 0, host_trace))


def _rank_manifest(rank_id: int, bubble_window_count: int, host_trace: dict) -> dict:
    return {
        "rank_id": rank_id,
        "bubble_window_count": int(bubble_window_count),
        "host_trace": {k: v for k, v in host_trace.items() if k != "note"},
        "unreadable_inputs": [host_trace["note"]] if "note" in host_trace else [],
    }


def _host_api(
    events: pd.DataFrame, host: HostTrace, steps: pd.DataFrame, masks: dict[str, np.ndarray], launch_us: np.ndarray
) -> pd.DataFrame:
    """The rank's API sums per step, its time per step in each host class (``masks``), and its kernels'
    launch-to-start delays per step (``launch_us``: each kernel's launch)."""
    start_us = events["start_ns"].to_numpy() / 1000.0
    parts = [
        host_api_summary(host.events, steps),
        host_activity(host.events, steps, masks),
        launch_delays(start_us, events["step_ordinal"].to_numpy(float), launch_us, steps),
    ]
    return pd.concat([p for p in parts if len(p)] or parts[:1], ignore_index=True)


def _with_causes(
    events: pd.DataFrame,
    gaps: pd.DataFrame,
    steps: pd.DataFrame,
    bubbles: pd.DataFrame,
    host: HostTrace,
    masks: dict[str, np.ndarray],
    launch_us: np.ndarray,
):
    """The bubble windows with their cause, the gaps the host caused, idle ms by cause per step, and
    the rank's median gap between kernels it had queued."""
    after_pos = gaps["after_pos"].to_numpy()  # the kernel each gap ends at
    after = events.iloc[after_pos]
    causes = gap_causes(gaps, launch_us[after_pos], host.events, masks, host.copies)
    duration = (gaps["end_ns"] - gaps["start_ns"]).to_numpy() / 1000.0
    by_start = causes[["cause", "cause_share"]].set_axis(gaps["start_ns"].to_numpy())
    bubbles = bubbles.assign(
        cause=by_start["cause"].reindex(bubbles["start_ns"]).to_numpy(),
        cause_share=by_start["cause_share"].reindex(bubbles["start_ns"]).to_numpy(),
    )
    host_caused = ((causes["cause"] != QUEUED) | (causes[cause_column(COPY)] > 0)).to_numpy()  # or a copy in it
    host_gaps = pd.concat(
        [
            gaps[["step_ordinal", "start_ns", "end_ns"]].reset_index(drop=True),
            pd.DataFrame(
                {
                    "duration_us": duration,
                    "after_name": after["name"].to_numpy(),
                    "after_row": after["row_idx"].to_numpy(),
                }
            ),
            causes.drop(columns=cause_column(QUEUED)).reset_index(drop=True),
        ],
        axis=1,
    ).loc[host_caused]
    return bubbles, host_gaps, idle_by_cause(gaps, causes, steps), queued_gap_floor_us(causes)


def reduce_root(ctx: RootContext) -> StageResult:
    """The root's evidence files, and which ranks' idle windows carry host labels."""
    rank_manifests = sorted(ctx.rank_manifests, key=lambda m: m["rank_id"])
    traced = [m["rank_id"] for m in rank_manifests if m["host_trace"].get("status") == "ok"]
    untraced = [m["rank_id"] for m in rank_manifests if m["host_trace"].get("status") in ("missing", "unreadable")]
    unreadable = [note for m in rank_manifests for note in m["unreadable_inputs"]]
    limitations = [note_text(note) for note in unreadable]
    if untraced:
        limitations.append(
            f"{'rank' if len(untraced) == 1 else 'ranks'} {', '.join(map(str, untraced))} "
            f"{'has' if len(untraced) == 1 else 'have'} no readable trace_view.json: "
            "their idle windows carry no host labels"
        )
    capped = [
        m["host_trace"] | {"rank_id": m["rank_id"]} for m in rank_manifests if m["host_trace"].get("dropped_at_cap")
    ]
    if capped:
        limitations.append(
            f"ranks {[c['rank_id'] for c in capped]} hold more host events over their steps than the "
            f"{capped[0]['cap']} read per rank (evidence_rules.yaml, host_trace.max_events_per_rank): "
            f"{sum(c['dropped_at_cap'] for c in capped)} past it in file order were not read, so the host causes of "
            "their idle time are incomplete"
        )
    manifest = {
        "bubble_window_count": sum(int(m["bubble_window_count"]) for m in rank_manifests),
        "inputs": {
            schema.BUBBLE_WINDOWS.name: "idle gaps of the steps (no event running), at least bubble_min_us long",
            "host labels": "trace_view.json per rank (host events overlapping each idle window)",
            schema.EVIDENCE_INDEX.name: "step segments, idle windows, operator_summary, communication_events",
        },
        "limitations": limitations,
        # what bubble_windows.jsonl and evidence_index.csv list of each rank's idle windows (the
        # Parquet tables hold them all; report/cited_evidence.csv every one a finding cites)
        "windows_listed_per_rank": windows_listed(ctx) or "all",
        "unreadable_inputs": unreadable,
        "host_trace": {
            "ranks_attributed": traced,
            "by_rank": {str(m["rank_id"]): m["host_trace"] for m in rank_manifests},
        },
        "rank_summaries": rank_manifests,
    }
    listed = listed_window_ids(ctx)
    rendered = {
        schema.BUBBLE_WINDOWS_JSONL: _bubble_jsonl_chunks(ctx, listed),
        schema.EVIDENCE_INDEX_CSV.file: _evidence_csv_chunks(ctx, listed),
    }
    views = {
        schema.STEP_TIME_ACCOUNTING_CSV: _accounting(ctx),
        schema.HOST_API_SUMMARY_CSV: schema.join_view(
            schema.HOST_API_SUMMARY_CSV, [ctx.read_frame(schema.HOST_API_SUMMARY)]
        ),
    }
    return StageResult(rendered=rendered, csv_views=views, manifest=manifest)


def _accounting(ctx: RootContext) -> pd.DataFrame:
    """step_time_accounting.csv: summarize's rows of each step, then its idle time by host cause."""
    rows = [ctx.read_frame(schema.STEP_TIME_ACCOUNTING), ctx.read_frame(schema.IDLE_BY_CAUSE)]
    return schema.join_view(schema.STEP_TIME_ACCOUNTING_CSV, [pd.concat([r for r in rows if len(r)] or rows[:1])])


def windows_listed(ctx: RootContext) -> int | None:
    """How many idle windows per rank the text views list: all in full mode, the longest
    ``views.fast_windows_per_rank`` in fast mode (evidence_rules.yaml)."""
    if ctx.options.mode == "full":
        return None
    return int(knowledge.load("evidence_rules")["views"]["fast_windows_per_rank"])


def listed_window_ids(ctx: RootContext) -> dict[int, set[str]] | None:
    """Per rank, the ids of the idle windows the text views list (``windows_listed``): its longest,
    ties to the earlier; None where they list every window. One narrow read of each rank's windows
    serves both views."""
    listed = windows_listed(ctx)
    if listed is None:
        return None
    ids = {}
    for rank_id in io.partition_ranks(ctx.out_dir, schema.BUBBLE_WINDOWS):
        columns = ["evidence_id", "start_ns", "end_ns"]
        bubbles = io.read_dataset(ctx.out_dir, schema.BUBBLE_WINDOWS, rank_id, columns=columns).to_pandas()
        longest = (bubbles["end_ns"] - bubbles["start_ns"]).sort_values(ascending=False, kind="stable").index[:listed]
        ids[int(rank_id)] = set(bubbles.loc[longest, "evidence_id"])
    return ids


def _listed_rows(
    listed: dict[int, set[str]] | None, windows_only: bool
) -> Callable[[int, pa.Table], pa.ChunkedArray] | None:
    """``RootContext.rank_frames``' ``keep`` for a view: a rank's rows but the idle windows not ``listed`` (every
    row where they all are); ``windows_only``: every row is an idle window (else those of kind bubble_window)."""
    if listed is None:
        return None

    def keep(rank_id: int, part: pa.Table) -> pa.ChunkedArray:
        ids = pa.array(sorted(listed.get(rank_id, set())), pa.string())
        kept = pc.fill_null(pc.is_in(part["evidence_id"], value_set=ids), False)
        if windows_only:
            return kept
        return pc.or_(pc.fill_null(pc.not_equal(part["kind"], "bubble_window"), True), kept)

    return keep


def _bubble_jsonl_chunks(ctx: RootContext, listed: dict[int, set[str]] | None) -> Iterator[bytes]:
    """evidence/bubble_windows.jsonl: each rank's idle windows (all, or those ``listed``) by start time,
    ranks in order."""
    for bubbles in ctx.rank_frames(schema.BUBBLE_WINDOWS, keep=_listed_rows(listed, windows_only=True)):
        yield bubble_windows_jsonl(bubbles.sort_values("start_ns", kind="stable"))


def _evidence_csv_chunks(ctx: RootContext, listed: dict[int, set[str]] | None) -> Iterator[bytes]:
    """evidence_index.csv, rank by rank (the header once): every row but the idle windows not ``listed``."""
    header = True
    for frame in ctx.rank_frames(schema.EVIDENCE_INDEX, keep=_listed_rows(listed, windows_only=False)):
        if frame.empty:
            continue
        yield from io.csv_chunks(schema.join_view(schema.EVIDENCE_INDEX_CSV, [frame]), header=header)
        header = False
    if header:  # no rank has evidence: the declared columns
        yield from io.csv_chunks(pd.DataFrame(columns=list(schema.EVIDENCE_INDEX_CSV.columns)))


def headline(manifest: dict) -> tuple[dict, list[str]]:
    """evidence's part of the result JSON: idle windows found, and what could not be labelled."""
    return {"bubble_window_count": manifest["bubble_window_count"], "limitations": manifest["limitations"]}, []
