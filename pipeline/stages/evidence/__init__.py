"""The evidence stage, in one package: its declaration (``STAGE``), its code (``stage.py``: map and
reduce), and what only it uses — the host trace readers (``host_trace.py`` streamed from
trace_view.json in the batches ``trace_batches.py`` reads, with the device's copies of ``trace_copies.py``;
``host_db.py`` from the profiler db), the attribution of idle windows to host
activity (``attribution.py``, ``host_api.py``), the idle causes (``idle_causes.py``: later stages read
its cause names) and the evidence index (``index.py``; the ids it resolves are named in
``pipeline/evidence_ids.py``, which summarize writes too)."""

from __future__ import annotations

from npuprof.pipeline import schema
from npuprof.pipeline.stages.base import RankRead, Stage
from npuprof.pipeline.stages.evidence import stage

STAGE = Stage(
    name="evidence",
    requires=(
        schema.stage_manifest_name("summarize"),
        schema.STEP_SEGMENTS,
        schema.OPERATOR_SUMMARY,
        schema.COMMUNICATION_EVENTS,
        schema.STEP_TIME_ACCOUNTING,
    ),
    produces=(
        schema.BUBBLE_WINDOWS,
        schema.HOST_IDLE_GAPS,
        schema.DEVICE_COPIES,
        schema.HCCL_TASKS,
        schema.LAUNCH_SCOPES,
        schema.IDLE_BY_CAUSE,
        schema.HOST_API_SUMMARY,
        schema.HOST_API_SUMMARY_CSV,
        schema.EVIDENCE_INDEX,
        schema.EVIDENCE_DIR,
        schema.EVIDENCE_INDEX_CSV,
        schema.STEP_TIME_ACCOUNTING_CSV,  # summarize's rows and the idle time by cause
    ),
    map_rank=stage.map_rank,
    map_eventless=stage.map_eventless,
    map_reads=(
        RankRead(schema.NORMALIZED_EVENTS, tuple(stage.EVIDENCE_INPUT_COLUMNS)),
        RankRead(schema.STEP_SEGMENTS),
        RankRead(schema.LAYER_SEGMENTS),
        RankRead(schema.OPERATOR_SUMMARY),
        RankRead(schema.COMMUNICATION_EVENTS),
    ),
    reduce_root=stage.reduce_root,
    headline=stage.headline,
)
