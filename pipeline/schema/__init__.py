"""Every table and artifact npuprof writes, declared once (design.md §2).

One module per table family: ``events`` (normalize), ``segments`` (segment), ``classes`` and
``anatomy`` (classify); ``artifacts`` holds the file names of JSON documents and sweep files.
Writers, readers, the runner, the rollup, ``Analysis``, the service and the tests import names from
here; no other module spells a table or artifact file name (a test checks it).
"""

from __future__ import annotations

from npuprof.pipeline.schema.anatomy import STEP_ANATOMY, STEP_ANATOMY_CSV
from npuprof.pipeline.schema.artifacts import (
    ANALYSIS_SUMMARY,
    BUBBLE_WINDOWS_JSONL,
    CAPTURE_INFO,
    CLASS_SIGNATURES,
    DIAGNOSIS_FINDINGS,
    EVIDENCE_DIR,
    FAILURE_JSON,
    REPORT_DIR,
    REPORT_MD,
    ROLLUP_ROW_CACHE,
    RUN_LOCK,
    SOURCE_INDEX,
    SWEEP_ROLLUP,
    SWEEP_SUMMARY,
    TOP_MANIFEST,
)
from npuprof.pipeline.schema.classes import (
    BLOCK_SEGMENTS,
    BLOCK_SUMMARY,
    LAYER_CLASSES,
    LAYER_SUMMARY,
    STEP_CLASSES,
    STEP_SUMMARY,
    WINDOW_METRIC_COLUMNS,
    WINDOW_METRICS,
)
from npuprof.pipeline.schema.events import (
    EVENT_COLUMNS,
    EVENT_SCHEMA,
    FLOAT_EVENT_COLUMNS,
    INT_EVENT_COLUMNS,
    NORMALIZED_EVENTS,
    PIPELINE_FIELDS,
    PMU_EXTRA_FIELDS,
    STRING_EVENT_COLUMNS,
)
from npuprof.pipeline.schema.segments import LAYER_SEGMENTS, STEP_SEGMENTS, WINDOW_EVIDENCE
from npuprof.pipeline.schema.summaries import (
    BUBBLE_WINDOWS,
    COMMUNICATION_EVENTS,
    COMMUNICATION_LINKS,
    COMMUNICATION_LINKS_CSV,
    COMMUNICATION_OPS,
    COMMUNICATION_SUMMARY_CSV,
    EVIDENCE_INDEX,
    EVIDENCE_INDEX_CSV,
    HCCL_CLASS_SUMMARY,
    HCCL_CLASS_SUMMARY_CSV,
    HCCL_OP_SUMMARY,
    HCCL_OP_SUMMARY_CSV,
    OPERATOR_CLASS_SUMMARY,
    OPERATOR_CLASS_SUMMARY_CSV,
    OPERATOR_SUMMARY,
    OPERATOR_SUMMARY_CSV,
    RANK_SUMMARY,
    RANK_SUMMARY_CSV,
    STEP_TIME_ACCOUNTING,
    STEP_TIME_ACCOUNTING_CSV,
    TRANSPORTS,
)
from npuprof.pipeline.schema.table import RANK_PARTITION_KEY, CsvView, Table, as_path, join_view, stage_manifest_name

TABLES: tuple[Table, ...] = (
    NORMALIZED_EVENTS,
    STEP_SEGMENTS,
    LAYER_SEGMENTS,
    BLOCK_SEGMENTS,
    STEP_CLASSES,
    LAYER_CLASSES,
    STEP_ANATOMY,
    OPERATOR_SUMMARY,
    STEP_TIME_ACCOUNTING,
    COMMUNICATION_EVENTS,
    COMMUNICATION_OPS,
    COMMUNICATION_LINKS,
    BUBBLE_WINDOWS,
    EVIDENCE_INDEX,
)
# classify's views of its per-rank tables
CSV_VIEWS: tuple[CsvView, ...] = (STEP_SUMMARY, LAYER_SUMMARY, BLOCK_SUMMARY, STEP_ANATOMY_CSV)
# summarize's user-facing tables
SUMMARY_CSVS: tuple[CsvView, ...] = (
    OPERATOR_SUMMARY_CSV,
    OPERATOR_CLASS_SUMMARY_CSV,
    HCCL_OP_SUMMARY_CSV,
    HCCL_CLASS_SUMMARY_CSV,
    STEP_TIME_ACCOUNTING_CSV,
    RANK_SUMMARY_CSV,
    COMMUNICATION_SUMMARY_CSV,
    COMMUNICATION_LINKS_CSV,
    EVIDENCE_INDEX_CSV,
)

# What `npuprof fetch --root` copies of one root (those that exist).
FETCHABLE: tuple[str, ...] = (
    ANALYSIS_SUMMARY,
    REPORT_MD,
    DIAGNOSIS_FINDINGS,
    TOP_MANIFEST,
    STEP_SUMMARY.file,
    stage_manifest_name("segment"),
)

__all__ = [
    "BUBBLE_WINDOWS",
    "BUBBLE_WINDOWS_JSONL",
    "EVIDENCE_DIR",
    "EVIDENCE_INDEX",
    "EVIDENCE_INDEX_CSV",
    "COMMUNICATION_LINKS",
    "COMMUNICATION_LINKS_CSV",
    "COMMUNICATION_OPS",
    "COMMUNICATION_SUMMARY_CSV",
    "TRANSPORTS",
    "COMMUNICATION_EVENTS",
    "HCCL_CLASS_SUMMARY",
    "HCCL_CLASS_SUMMARY_CSV",
    "HCCL_OP_SUMMARY",
    "HCCL_OP_SUMMARY_CSV",
    "OPERATOR_CLASS_SUMMARY",
    "OPERATOR_CLASS_SUMMARY_CSV",
    "OPERATOR_SUMMARY",
    "OPERATOR_SUMMARY_CSV",
    "RANK_SUMMARY",
    "RANK_SUMMARY_CSV",
    "STEP_TIME_ACCOUNTING",
    "STEP_TIME_ACCOUNTING_CSV",
    "SUMMARY_CSVS",
    "ANALYSIS_SUMMARY",
    "BLOCK_SEGMENTS",
    "BLOCK_SUMMARY",
    "CAPTURE_INFO",
    "CLASS_SIGNATURES",
    "CSV_VIEWS",
    "CsvView",
    "DIAGNOSIS_FINDINGS",
    "EVENT_COLUMNS",
    "EVENT_SCHEMA",
    "FAILURE_JSON",
    "FETCHABLE",
    "FLOAT_EVENT_COLUMNS",
    "INT_EVENT_COLUMNS",
    "LAYER_CLASSES",
    "LAYER_SEGMENTS",
    "LAYER_SUMMARY",
    "NORMALIZED_EVENTS",
    "PIPELINE_FIELDS",
    "PMU_EXTRA_FIELDS",
    "RANK_PARTITION_KEY",
    "REPORT_DIR",
    "REPORT_MD",
    "ROLLUP_ROW_CACHE",
    "RUN_LOCK",
    "SOURCE_INDEX",
    "STEP_ANATOMY",
    "STEP_ANATOMY_CSV",
    "STEP_CLASSES",
    "STEP_SEGMENTS",
    "STEP_SUMMARY",
    "STRING_EVENT_COLUMNS",
    "SWEEP_ROLLUP",
    "SWEEP_SUMMARY",
    "TABLES",
    "TOP_MANIFEST",
    "Table",
    "WINDOW_EVIDENCE",
    "WINDOW_METRICS",
    "WINDOW_METRIC_COLUMNS",
    "as_path",
    "join_view",
    "stage_manifest_name",
]
