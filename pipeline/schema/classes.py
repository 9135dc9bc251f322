"""classify's tables: blocks of every layer, and the classes and time metrics of steps, layers, blocks.

Every window (step, layer, block, anatomy window) carries the same time metrics (``WINDOW_METRICS``,
computed by ``segmentation.windows.window_metrics``).
"""

from __future__ import annotations

import pyarrow as pa

from npuprof.pipeline.schema.segments import LAYER_SEGMENTS, STEP_SEGMENTS, WINDOW_EVIDENCE
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

# diagnostics' step tags: thresholds of diagnosis_rules.yaml (anomaly_tags) over the step measurements
STEP_ANOMALIES = Table(
    "step_anomalies",
    pa.schema(
        [
            ("rank_id", pa.int64()),
            ("step_ordinal", pa.int64()),
            ("step_id", pa.int64()),
            ("anomaly_tags", pa.string()),  # ';'-joined tags of knowledge/diagnosis_rules.yaml anomaly_tags
            ("anomaly_text", pa.string()),  # the tags' wording (their `text:` in diagnosis_rules.yaml), '; '-joined
        ]
    ),
    per_rank=False,
)
STEP_ANOMALIES_CSV = CsvView("step_anomalies.csv", (STEP_ANOMALIES,), ())

# diagnostics' account of every ms of each step (diagnosis/ledger.py): the lines of one rank and step
# add up to its wall; each is explained by a finding, an expected reason, or is unexplained
STEP_LEDGER = Table(
    "step_ledger",
    pa.schema(
        [
            ("rank_id", pa.int64()),
            ("step_ordinal", pa.int64()),
            ("step_id", pa.int64()),
            ("complete", pa.bool_()),
            ("wall_ms", pa.float64()),
            ("category", pa.string()),  # compute | overlap | communication | idle
            ("line", pa.string()),  # 'compute attention', 'communication DP allreduce wait', 'idle launch' ...
            ("ms", pa.float64()),
            ("share", pa.float64()),  # of wall_ms
            ("explained_by", pa.string()),  # a finding's claim_id, expected:<reason>, or unexplained
            ("finding_type", pa.string()),  # the explaining finding's type (null: none)
            ("blamed_ranks", pa.string()),  # the ranks that finding names: a peer's wait is blamed on them
        ]
    ),
    per_rank=False,
)
STEP_LEDGER_CSV = CsvView("step_ledger.csv", (STEP_LEDGER,), ())

# diagnostics' critical path of each step across ranks (diagnosis/critical_path.py): the segments,
# in order, that decide when the step ends — a rank's own work, a collective's transit after its
# last member arrived, the finishing rank's tail
CRITICAL_PATH = Table(
    "critical_path",
    pa.schema(
        [
            ("step_key", pa.int64()),  # the step's id (its ordinal for steps found by structure)
            ("position", pa.int64()),  # order along the path, from the step's start
            ("rank_id", pa.int64()),
            ("segment", pa.string()),  # work | transit | tail
            ("start_us", pa.float64()),  # on the common (corrected) clock
            ("end_us", pa.float64()),
            ("ms", pa.float64()),
            ("alignment_id", pa.string()),  # the collective (cross_rank_alignment) it leads into or is
        ]
    ),
    per_rank=False,
)
CRITICAL_PATH_CSV = CsvView("critical_path.csv", (CRITICAL_PATH,), ())

# diagnostics' comparison of each slow rank with its peers (diagnosis/slow_card.py), per step
SLOW_RANK_DIFF = Table(
    "slow_rank_diff",
    pa.schema(
        [
            ("rank_id", pa.int64()),  # the slow rank
            ("peer_ranks", pa.string()),  # ' '-joined: the ranks its median is taken over
            ("level", pa.string()),  # step | time | operator | idle_cause | compute_work
            ("key", pa.string()),  # the measure: 'own time', a category, an operator name, 'Mcycles' ...
            ("value", pa.float64()),  # the slow rank's, per step (ms; compute_work Mcycles in millions)
            ("peer_median", pa.float64()),
            ("ratio", pa.float64()),  # value / peer_median (null where the peers have none)
            ("extra", pa.float64()),  # value - peer_median
            ("share_of_extra", pa.float64()),  # extra / the rank's extra own time per step
        ]
    ),
    per_rank=False,
)
SLOW_RANK_DIFF_CSV = CsvView("slow_rank_diff.csv", (SLOW_RANK_DIFF,), ())
