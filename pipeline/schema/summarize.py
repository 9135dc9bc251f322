"""summarize's tables: operators, communication ops, per-step time accounting and ranks; the block class summary.

Times here are µs for operator and HCCL tables (kernels are µs-sized) and ms for step-level tables
(steps are ms-sized), as the column names say.
"""

from __future__ import annotations

import pyarrow as pa

from npuprof.pipeline.schema.classify import CLASS_WALL_STATS
from npuprof.pipeline.schema.normalize import PIPELINE_FIELDS
from npuprof.pipeline.schema.table import CsvView, Table

BOUND_LABELS: list[tuple[str, pa.DataType]] = [
    ("bound_stage", pa.string()),  # the pipeline stage with the most time (or the op type's own kind)
    ("bound_family", pa.string()),  # cube | vector | aic_mte | aiv_mte | scalar | mixed | aicpu | ...
    ("dominant_core", pa.string()),  # aic | aiv | mix | none
    ("pipeline_signal", pa.bool_()),  # the capture has PMU data for these events
]
OPERATOR_SUMMARY = Table(
    "operator_summary",
    pa.schema(
        [
            ("evidence_id", pa.string()),  # r<rank>.op<k>: resolves in evidence_index
            ("name", pa.string()),
            ("type", pa.string()),
            ("op_type", pa.string()),
            ("primary_category", pa.string()),
            ("categories", pa.string()),  # '|'-joined
            ("roles", pa.string()),  # '|'-joined
            ("call_count", pa.int64()),
            ("duration_sum_us", pa.float64()),
            ("duration_avg_us", pa.float64()),
            ("wait_sum_us", pa.float64()),
            ("total_cost_us", pa.float64()),  # duration + wait
            ("wait_ratio", pa.float64()),  # wait / total cost
            ("stream_count", pa.int64()),
            ("row_start", pa.int64()),  # evidence: the first and last source rows of the operator
            ("row_end", pa.int64()),
            ("sample_rows", pa.string()),  # up to 5 source rows, ';'-joined
            ("first_start_us", pa.float64()),  # the time window of its calls
            ("last_end_us", pa.float64()),
            *BOUND_LABELS,
            *[(f"{field}_sum", pa.float64()) for field in PIPELINE_FIELDS],
        ]
    ),
)
COMMUNICATION_EVENTS = Table(
    "communication_events",
    pa.schema(
        [
            ("step_ordinal", pa.float64()),  # null outside every step
            ("layer_ordinal", pa.float64()),  # the layer and block it ran in (null outside layers)
            ("block_kind", pa.string()),
            ("block_class_id", pa.string()),
            ("evidence_id", pa.string()),  # r<rank>.comm<row_idx>: resolves in evidence_index
            ("row_idx", pa.int64()),
            ("start_ns", pa.int64()),
            ("end_ns", pa.int64()),
            ("name", pa.string()),
            ("kind", pa.string()),
            ("comm_aiv_fused", pa.bool_()),
            ("parallel_role", pa.string()),
            ("duration_us", pa.float64()),
            ("wait_us", pa.float64()),
            # its rank's compute running beside it: a communication stream of its own (a gradient bucket)
            ("compute_beside_us", pa.float64()),
        ]
    ),
)
TRANSPORTS = ("RDMA", "HCCS", "PCIE", "SDMA", "SIO")
COMMUNICATION_OPS = Table(
    "communication_ops",
    pa.schema(
        [
            ("step_id", pa.int64()),
            ("op_scope", pa.string()),  # collective | p2p
            ("op_name", pa.string()),  # hcom_<op>__<hash3>_<seq>_1: the same on every rank of the group
            ("group_hash", pa.string()),  # double_hash of the group key (communication.json "@" suffix)
            ("parallel_role", pa.string()),
            ("source", pa.string()),  # communication_json | analysis_db (db export) | events (neither readable)
            ("start_us", pa.float64()),
            ("elapse_ms", pa.float64()),  # = transit + wait + idle
            ("transit_ms", pa.float64()),
            ("wait_ms", pa.float64()),
            ("synchronization_ms", pa.float64()),
            ("idle_ms", pa.float64()),
            *[
                (f"{transport.lower()}_{what}", pa.float64())
                for transport in TRANSPORTS
                for what in ("size_mb", "time_ms", "bandwidth_gbps")
            ],
            ("packet_sizes_mb", pa.string()),  # "<size>x<count>;..." of the busiest transport
        ]
    ),
)
COMMUNICATION_LINKS = Table(
    "communication_links",
    pa.schema(
        [
            ("step_id", pa.int64()),
            ("op_scope", pa.string()),
            ("op_kind", pa.string()),  # allreduce | reduce | batchsendrecv | ...
            ("tier", pa.string()),  # top1 (fastest) | middle | bottom1..3 (slowest) | total
            ("group_hash", pa.string()),
            ("parallel_role", pa.string()),
            ("src_local_rank", pa.int64()),  # ranks within the group
            ("dst_local_rank", pa.int64()),
            ("transport", pa.string()),  # LOCAL | HCCS | SDMA | RDMA | PCIE | SIO
            ("size_mb", pa.float64()),
            ("time_ms", pa.float64()),
            ("bandwidth_gbps", pa.float64()),
            ("op_name", pa.string()),
        ]
    ),
)
BLOCK_CLASS_OPS = Table(
    "block_class_ops",
    pa.schema(
        [
            ("block_class_id", pa.string()),
            ("name", pa.string()),
            ("op_type", pa.string()),
            ("call_count", pa.int64()),
            ("duration_us", pa.float64()),
            *[(f"{field}_sum", pa.float64()) for field in PIPELINE_FIELDS],
        ]
    ),
)
BLOCK_CLASS_SUMMARY = Table(
    "block_class_summary",
    pa.schema(
        [
            ("block_class_id", pa.string()),
            ("block_kind", pa.string()),
            ("layer_role", pa.string()),
            *CLASS_WALL_STATS,
            ("comm_ms_mean", pa.float64()),  # communication time inside one member
            ("comm_share_mean", pa.float64()),  # of its wall
            *BOUND_LABELS,  # of its compute kernels' summed pipeline time
            ("top_ops", pa.string()),  # the 5 heaviest kernels: "name=ms;..." (ms per member)
        ]
    ),
    per_rank=False,
)
OPERATOR_CLASS_SUMMARY = Table(
    "operator_class_summary",
    pa.schema(
        [
            ("name", pa.string()),
            ("type", pa.string()),
            ("op_type", pa.string()),
            ("primary_category", pa.string()),
            ("rank_count", pa.int64()),
            ("call_count", pa.int64()),
            ("duration_sum_us", pa.float64()),
            ("duration_avg_us", pa.float64()),
            ("wait_sum_us", pa.float64()),
            ("wait_ratio", pa.float64()),
            ("rank_duration_min_us", pa.float64()),  # of the per-rank duration sums
            ("rank_duration_max_us", pa.float64()),
            ("rank_duration_p50_us", pa.float64()),
            ("rank_duration_skew_ratio", pa.float64()),  # (max - min) / mean over ranks
            *BOUND_LABELS,
            *[(f"{field}_sum", pa.float64()) for field in PIPELINE_FIELDS],
            ("all_cores_duration_sum_us", pa.float64()),  # the kernel (name, type) over every core type
            ("core_split", pa.string()),  # "aic 110.7 ms; mix_cv 36.8 ms" where it runs on several
        ]
    ),
    per_rank=False,
)
STEP_TIME_ACCOUNTING = Table(
    "step_time_accounting",
    pa.schema(
        [
            ("step_ordinal", pa.int64()),
            ("step_id", pa.int64()),
            ("complete", pa.bool_()),
            ("wall_ms", pa.float64()),
            # primary: compute (by bound family), communication (by kind), overlap, idle (by window):
            # these rows add up to wall_ms. comm_by_role, comm_by_role_kind ('PP send_recv') and
            # compute_by_op_type re-split one category; comm_hidden_by_role_kind splits the overlap.
            ("breakdown", pa.string()),
            ("category", pa.string()),  # compute | communication | overlap | idle
            ("component", pa.string()),
            ("ms", pa.float64()),
            ("share", pa.float64()),  # of wall_ms
        ]
    ),
)
STEP_TRACE_ACCOUNTING = Table(
    "step_trace_accounting",  # ranks without device events: their profiler's own step split
    pa.schema(
        [
            ("rank_id", pa.int64()),
            ("step_id", pa.int64()),
            ("wall_ms", pa.float64()),  # Stage
            ("compute_ms", pa.float64()),  # Computing minus Overlapped
            ("overlap_ms", pa.float64()),  # Overlapped
            ("exposed_comm_ms", pa.float64()),  # Communication(Not Overlapped)
            ("idle_ms", pa.float64()),  # Free
            ("source_path", pa.string()),  # the rank's step_trace_time.csv
        ]
    ),
    per_rank=False,
)
PP_SCHEDULE = Table(
    "pp_schedule",  # pipeline parallel only: per rank and step (columns: summaries/pp_schedule.py)
    pa.schema(
        [
            ("rank_id", pa.int32()),
            ("step_ordinal", pa.int64()),
            ("step_id", pa.int64()),
            ("complete", pa.bool_()),
            ("pp_group", pa.string()),
            ("stage", pa.int64()),
            ("stages", pa.int64()),
            ("micro_batches", pa.int64()),
            ("schedule", pa.string()),
            ("layers_held", pa.int64()),
            ("layer_ms", pa.float64()),
            ("wall_ms", pa.float64()),
            ("compute_ms", pa.float64()),
            ("pp_exposed_ms", pa.float64()),
            ("idle_ms", pa.float64()),
            ("pipeline_wait_ms", pa.float64()),  # idle gaps ≥ idle_by_gap.gap_min_us beside a P2P op
            ("embedding_wait_ms", pa.float64()),  # the tied embedding all-reduce's exposed wait (the drain)
            ("bubble_ms", pa.float64()),
            ("bubble_share", pa.float64()),
            ("ideal_bubble_share", pa.float64()),
        ]
    ),
    per_rank=False,
)
RANK_SUMMARY = Table(
    "rank_summary",
    pa.schema(
        [
            ("rank_id", pa.int32()),
            ("event_count", pa.int64()),
            ("step_count", pa.int64()),
            ("complete_step_count", pa.int64()),
            ("wall_ms_mean", pa.float64()),  # over complete steps
            ("wall_ms_p50", pa.float64()),
            ("wall_ms_p90", pa.float64()),
            ("wall_ms_max", pa.float64()),
            ("busy_ms_mean", pa.float64()),
            ("bubble_share", pa.float64()),  # idle / wall over complete steps
            ("compute_share", pa.float64()),
            ("communication_share", pa.float64()),  # exposed (not overlapped with compute)
            ("overlap_share", pa.float64()),
            ("accounting_source", pa.string()),  # kernels | step_trace_time.csv (no kernels held) | none
            ("bubbling_step_count", pa.int64()),  # complete steps with an internal bubble
            ("bubble_recurrence_ratio", pa.float64()),  # bubbling / complete steps
            ("recurring_bubble_pattern", pa.bool_()),
            ("dominant_idle_pattern", pa.string()),  # prelaunch | internal | tail | none
        ]
    ),
    per_rank=False,
)
OPERATOR_SUMMARY_CSV = CsvView("operator_summary.csv", (OPERATOR_SUMMARY,), ("rank_id",))
OPERATOR_CLASS_SUMMARY_CSV = CsvView("operator_class_summary.csv", (OPERATOR_CLASS_SUMMARY,), ())
RANK_SUMMARY_CSV = CsvView("rank_summary.csv", (RANK_SUMMARY,), ())
PP_SCHEDULE_CSV = CsvView("pp_schedule.csv", (PP_SCHEDULE,), ())
STEP_TRACE_ACCOUNTING_CSV = CsvView("step_trace_accounting.csv", (STEP_TRACE_ACCOUNTING,), ())
BLOCK_CLASS_SUMMARY_CSV = CsvView("block_class_summary.csv", (BLOCK_CLASS_SUMMARY,), ())
