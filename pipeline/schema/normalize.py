"""The normalized event table: one row per device task (kernel or communication op) of a rank.

Timestamps: absolute device times have 16+ significant digits in µs (``1736408883704643.212``),
more than a float64 holds exactly, so every time in the normalized event table is **int64
nanoseconds** (``start_ns``, ``end_ns``, ``duration_ns``, ``wait_ns``). Pipeline (PMU) fields are
short durations and stay float64 µs.
"""

from __future__ import annotations

import pyarrow as pa

from npuprof.pipeline.schema.table import Table

# The 11 pipeline fields (µs), null where the capture has no PMU signal — never 0.
PIPELINE_FIELDS: tuple[str, ...] = (
    "aicore_time_us",
    "aiv_time_us",
    "aic_mac_time_us",
    "aic_fixpipe_time_us",
    "aic_mte1_time_us",
    "aic_mte2_time_us",
    "aic_scalar_time_us",
    "aiv_vec_time_us",
    "aiv_mte2_time_us",
    "aiv_mte3_time_us",
    "aiv_scalar_time_us",
)
# Other PMU columns kept because later stages (roofline) use them.
PMU_EXTRA_FIELDS: tuple[str, ...] = ("aic_total_cycles", "aiv_total_cycles", "cube_utilization_pct")
# rank_id is the hive partition key (``normalized_events/rank_id=<r>/``), not stored in the files.
EVENT_SCHEMA = pa.schema(
    [
        ("source_id", pa.string()),
        ("row_idx", pa.int64()),  # zero-based data row in the source: the evidence anchor
        ("source_row_key", pa.int64()),  # db: globalTaskId / opId of the row; null for CSV
        ("step_id", pa.int64()),
        ("device_id", pa.int64()),
        ("model_id", pa.int64()),
        ("stream_id", pa.int64()),
        ("task_id", pa.int64()),
        ("context_id", pa.int64()),
        ("name", pa.string()),
        ("type", pa.string()),
        ("accelerator_core", pa.string()),
        ("op_type", pa.string()),
        ("op_state", pa.string()),
        ("hf32_eligible", pa.string()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("duration_ns", pa.int64()),
        ("wait_ns", pa.int64()),
        ("block_dim", pa.int64()),
        ("mix_block_dim", pa.int64()),
        ("input_shapes", pa.string()),
        ("input_dtypes", pa.string()),
        ("input_formats", pa.string()),
        ("output_shapes", pa.string()),
        ("output_dtypes", pa.string()),
        ("output_formats", pa.string()),
        *[(field, pa.float64()) for field in PIPELINE_FIELDS],
        ("aic_total_cycles", pa.int64()),
        ("aiv_total_cycles", pa.int64()),
        ("cube_utilization_pct", pa.float64()),
        ("categories", pa.list_(pa.string())),
        ("roles", pa.list_(pa.string())),
        ("primary_category", pa.string()),
    ]
)
EVENT_COLUMNS: tuple[str, ...] = tuple(EVENT_SCHEMA.names)
STRING_EVENT_COLUMNS = tuple(f.name for f in EVENT_SCHEMA if f.type == pa.string())
INT_EVENT_COLUMNS = tuple(f.name for f in EVENT_SCHEMA if f.type == pa.int64())
FLOAT_EVENT_COLUMNS = tuple(f.name for f in EVENT_SCHEMA if f.type == pa.float64())
NORMALIZED_EVENTS = Table("normalized_events", EVENT_SCHEMA)
# AI Core frequency samples of a rank (profiler db AICORE_FREQ, or trace_view.json counter events):
# each holds from its time until the next sample. source_row: the db rowid or the trace byte offset.
AICORE_FREQ = Table(
    "aicore_frequency",
    pa.schema(
        [
            ("timestamp_ns", pa.int64()),
            ("freq_mhz", pa.float64()),
            ("source_id", pa.string()),
            ("source_row", pa.int64()),
        ]
    ),
)
