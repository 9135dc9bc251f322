"""classify's tables: blocks of every layer, the classes and time metrics of steps, layers and blocks,
each step's anatomy (head / main / tail windows; main spans the layers) and the step and layer class
summaries.

Every window (step, layer, block, anatomy window) carries the same time metrics (``WINDOW_METRICS``,
computed by ``segmentation.windows.window_metrics``).
"""

from __future__ import annotations

import pyarrow as pa

from npuprof.pipeline.schema.segment import LAYER_SEGMENTS, STEP_SEGMENTS, WINDOW_EVIDENCE
from npuprof.pipeline.schema.table import CsvView, Table

WINDOW_METRICS: list[tuple[str, pa.DataType]] = [
    ("wall_ms", pa.float64()),  # last end − first start
    ("busy_ms", pa.float64()),  # union of the window's kernel intervals
    ("underfeed_ms", pa.float64()),  # wall − busy: every idle gap
    ("underfeed_ratio", pa.float64()),
    ("kernel_sum_ms", pa.float64()),
    ("wait_sum_ms", pa.float64()),
    ("internal_bubble_total_ms", pa.float64()),  # idle gaps ≥ bubble_min_us
    ("largest_internal_bubble_ms", pa.float64()),
    ("bubble_count", pa.int64()),
]
WINDOW_METRIC_COLUMNS: tuple[str, ...] = tuple(name for name, _ in WINDOW_METRICS)
BLOCK_SEGMENTS = Table(
    "block_segments",
    pa.schema(
        [
            ("step_ordinal", pa.int64()),
            ("step_id", pa.int64()),
            ("layer_ordinal", pa.int64()),
            ("block_ordinal", pa.int64()),
            ("block_kind", pa.string()),  # attention | ffn | moe | aicpu | other
            ("layer_role", pa.string()),
            ("pos_start", pa.int64()),
            ("pos_end", pa.int64()),
            ("event_count", pa.int64()),
            *WINDOW_EVIDENCE,
            ("block_class_id", pa.string()),
            ("has_unknown_shape", pa.bool_()),
            *WINDOW_METRICS,
        ]
    ),
)
STEP_CLASSES = Table(
    "step_classes",
    pa.schema(
        [
            ("step_ordinal", pa.int64()),
            ("step_id", pa.int64()),
            ("complete", pa.bool_()),
            ("start_ns", pa.int64()),
            ("end_ns", pa.int64()),
            ("layer_count", pa.int64()),
            ("main_layer_count", pa.int64()),
            ("step_class_id", pa.string()),
            ("has_unknown_shape", pa.bool_()),
            *WINDOW_METRICS,
            ("prelaunch_gap_ms", pa.float64()),  # idle time since the previous step ended (null on the first)
            ("tail_gap_ms", pa.float64()),  # idle time until the next step starts (null on the last)
        ]
    ),
)
LAYER_CLASSES = Table(
    "layer_classes",
    pa.schema(
        [
            ("step_ordinal", pa.int64()),
            ("layer_ordinal", pa.int64()),
            ("layer_role", pa.string()),
            ("block_kinds", pa.string()),  # e.g. attention->ffn
            ("layer_class_id", pa.string()),
            ("has_unknown_shape", pa.bool_()),
            *WINDOW_METRICS,
        ]
    ),
)
STEP_SUMMARY = CsvView("step_summary.csv", (STEP_SEGMENTS, STEP_CLASSES), ("rank_id", "step_ordinal"))
LAYER_SUMMARY = CsvView(
    "layer_summary.csv", (LAYER_SEGMENTS, LAYER_CLASSES), ("rank_id", "step_ordinal", "layer_ordinal")
)
BLOCK_SUMMARY = CsvView(
    "block_summary.csv", (BLOCK_SEGMENTS,), ("rank_id", "step_ordinal", "layer_ordinal", "block_ordinal")
)
STEP_ANATOMY = Table(
    "step_anatomy",
    pa.schema(
        [
            ("step_ordinal", pa.int64()),
            ("step_id", pa.int64()),
            ("anatomy_kind", pa.string()),  # layered | head_only (a step without layers)
            ("window", pa.string()),  # head | main | tail
            ("pos_start", pa.int64()),
            ("pos_end", pa.int64()),
            ("event_count", pa.int64()),
            *WINDOW_METRICS,
            ("wall_share", pa.float64()),  # of the step's wall
        ]
    ),
)
STEP_ANATOMY_CSV = CsvView("step_anatomy.csv", (STEP_ANATOMY,), ("rank_id", "step_ordinal"))
CLASS_WALL_STATS: list[tuple[str, pa.DataType]] = [
    ("member_count", pa.int64()),
    ("rank_count", pa.int64()),
    ("has_unknown_shape", pa.bool_()),
    ("wall_ms_sum", pa.float64()),
    ("wall_ms_mean", pa.float64()),
    ("wall_ms_p50", pa.float64()),
    ("wall_ms_p90", pa.float64()),
    ("busy_ms_mean", pa.float64()),
    ("bubble_ms_mean", pa.float64()),  # idle gaps inside the window (underfeed)
]
LAYER_CLASS_SUMMARY = Table(
    "layer_class_summary",
    pa.schema(
        [
            ("layer_class_id", pa.string()),
            ("layer_role", pa.string()),
            ("block_kinds", pa.string()),
            *CLASS_WALL_STATS,
            ("block_kind_wall_share_mean", pa.string()),  # "attention=0.41;ffn=0.59"
        ]
    ),
    per_rank=False,
)
STEP_CLASS_SUMMARY = Table(
    "step_class_summary",
    pa.schema(
        [
            ("step_class_id", pa.string()),
            ("complete", pa.bool_()),
            *CLASS_WALL_STATS,
            ("head_ms_mean", pa.float64()),
            ("main_ms_mean", pa.float64()),
            ("tail_ms_mean", pa.float64()),
            ("bubble_ratio_mean", pa.float64()),
            ("top_layer_classes", pa.string()),  # the 5 layer classes with the most wall: "id=ms;..."
        ]
    ),
    per_rank=False,
)
LAYER_CLASS_SUMMARY_CSV = CsvView("layer_class_summary.csv", (LAYER_CLASS_SUMMARY,), ())
STEP_CLASS_SUMMARY_CSV = CsvView("step_class_summary.csv", (STEP_CLASS_SUMMARY,), ())
