"""summarize's tables: operators, communication ops, per-step time accounting and ranks.

Times here are µs for operator and HCCL tables (kernels are µs-sized) and ms for step-level tables
(steps are ms-sized), as the column names say.
"""

from __future__ import annotations

import pyarrow as pa

from npuprof.pipeline.schema.events import PIPELINE_FIELDS
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

BUBBLE_WINDOWS = Table(
    "bubble_windows",
    pa.schema(
        [
            ("evidence_id", pa.string()),  # r<rank>.step#<ordinal>.bubble<k>
            ("step_ordinal", pa.int64()),
            ("step_id", pa.int64()),
            ("kind", pa.string()),  # prelaunch | internal | tail (the anatomy window it sits in)
            ("start_ns", pa.int64()),
            ("end_ns", pa.int64()),
            ("duration_us", pa.float64()),
            ("before_name", pa.string()),  # the kernel that ended when the device went idle
            ("before_row", pa.int64()),
            ("after_name", pa.string()),  # the kernel that started when it resumed
            ("after_row", pa.int64()),
            ("source_id", pa.string()),
            # soft attribution from the rank's host trace (null without one): candidate causes only
            ("soft_labels", pa.string()),  # '|'-joined possible_* labels
            ("host_coverage", pa.float64()),  # share of the window covered by host events
            ("sync_overlap", pa.float64()),  # ... by sync / device-to-host markers
            ("comm_overlap", pa.float64()),  # ... by communication markers
            ("host_thread_count", pa.int64()),
            ("host_events", pa.string()),  # ';'-joined: the host events covering it most
            # its idle cause from the host trace (stages/evidence/idle_causes.py; null without one)
            ("cause", pa.string()),  # the cause holding most of it
            ("cause_share", pa.float64()),  # that cause's share of it
        ]
    ),
)

# Idle gaps (any length) the host caused, per rank: what the host did while the device waited
# (stages/evidence/idle_causes.py). Gaps the device had its next kernel queued for are left out.
HOST_IDLE_GAPS = Table(
    "host_idle_gaps",
    pa.schema(
        [
            ("step_ordinal", pa.int64()),
            ("start_ns", pa.int64()),
            ("end_ns", pa.int64()),
            ("duration_us", pa.float64()),
            ("after_name", pa.string()),  # the kernel the device waited for
            ("after_row", pa.int64()),
            ("launch_lead_us", pa.float64()),  # gap start - that kernel's host launch (< 0: launched late)
            ("cause", pa.string()),
            ("cause_share", pa.float64()),
            ("sync_us", pa.float64()),
            ("dataloader_us", pa.float64()),
            ("gc_us", pa.float64()),
            ("allocation_us", pa.float64()),
            ("launch_us", pa.float64()),
            ("unattributed_us", pa.float64()),
        ]
    ),
)

EVIDENCE_INDEX = Table(
    "evidence_index",
    pa.schema(
        [
            ("evidence_id", pa.string()),
            ("kind", pa.string()),  # step_window | bubble_window | operator | communication_op
            ("step_ordinal", pa.int64()),
            ("row_start", pa.int64()),  # source rows of the rank's kernel source
            ("row_end", pa.int64()),
            ("start_us", pa.float64()),
            ("end_us", pa.float64()),
            ("source_id", pa.string()),
            ("source_path", pa.string()),
            ("summary", pa.string()),
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

HCCL_OP_SUMMARY = Table(
    "hccl_op_summary",
    pa.schema(
        [
            ("kind", pa.string()),  # allreduce | allgather | reducescatter | alltoallv | send_recv | ...
            ("comm_aiv_fused", pa.bool_()),  # communication fused with AIV work (mix_comm_aiv)
            ("parallel_role", pa.string()),  # DP | TP | PP | EP | CP | WORLD | unknown
            ("rank_id", pa.int32()),
            ("name_count", pa.int64()),
            ("call_count", pa.int64()),
            ("duration_sum_us", pa.float64()),
            ("duration_avg_us", pa.float64()),
            ("duration_min_us", pa.float64()),
            ("duration_p50_us", pa.float64()),
            ("duration_p90_us", pa.float64()),
            ("duration_max_us", pa.float64()),
            ("wait_sum_us", pa.float64()),
            ("wait_ratio", pa.float64()),
        ]
    ),
    per_rank=False,
)

HCCL_CLASS_SUMMARY = Table(
    "hccl_class_summary",
    pa.schema(
        [
            ("kind", pa.string()),
            ("comm_aiv_fused", pa.bool_()),
            ("parallel_role", pa.string()),
            ("rank_count", pa.int64()),
            ("call_count", pa.int64()),
            ("duration_sum_us", pa.float64()),
            ("rank_avg_min_us", pa.float64()),  # of the per-rank mean durations
            ("rank_avg_max_us", pa.float64()),
            ("rank_avg_mean_us", pa.float64()),
            ("rank_skew_ratio", pa.float64()),  # (max - min) / mean of the per-rank means
            ("duration_max_us", pa.float64()),
            # the rank whose ops take longest on average (it waits most) and shortest (it arrives
            # last, so it waits least: the slow-rank suspect)
            ("max_avg_rank", pa.int32()),
            ("min_avg_rank", pa.int32()),
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

# CANN and framework API calls per rank, step and API (stages/evidence/host_api.py), like cann_api_sum
HOST_API_SUMMARY = Table(
    "host_api_summary",
    pa.schema(
        [
            ("step_ordinal", pa.int64()),
            ("step_id", pa.int64()),
            ("layer", pa.string()),  # cann | framework
            ("name", pa.string()),
            ("count", pa.int64()),
            ("total_us", pa.float64()),
            ("p50_us", pa.float64()),
            ("p99_us", pa.float64()),
        ]
    ),
)

# idle time of each step by host cause, in step_time_accounting's rows (breakdown idle_by_cause):
# written by evidence (it reads the host trace), listed with the other rows in step_time_accounting.csv
IDLE_BY_CAUSE = Table("step_idle_causes", STEP_TIME_ACCOUNTING.schema)

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
STEP_TIME_ACCOUNTING_CSV = CsvView("step_time_accounting.csv", (STEP_TIME_ACCOUNTING,), ("rank_id", "step_ordinal"))
OPERATOR_CLASS_SUMMARY_CSV = CsvView("operator_class_summary.csv", (OPERATOR_CLASS_SUMMARY,), ())
HCCL_OP_SUMMARY_CSV = CsvView("hccl_op_summary.csv", (HCCL_OP_SUMMARY,), ())
HCCL_CLASS_SUMMARY_CSV = CsvView("hccl_class_summary.csv", (HCCL_CLASS_SUMMARY,), ())
RANK_SUMMARY_CSV = CsvView("rank_summary.csv", (RANK_SUMMARY,), ())
PP_SCHEDULE_CSV = CsvView("pp_schedule.csv", (PP_SCHEDULE,), ())
STEP_TRACE_ACCOUNTING_CSV = CsvView("step_trace_accounting.csv", (STEP_TRACE_ACCOUNTING,), ())
BLOCK_CLASS_SUMMARY_CSV = CsvView("block_class_summary.csv", (BLOCK_CLASS_SUMMARY,), ())
LAYER_CLASS_SUMMARY_CSV = CsvView("layer_class_summary.csv", (LAYER_CLASS_SUMMARY,), ())
STEP_CLASS_SUMMARY_CSV = CsvView("step_class_summary.csv", (STEP_CLASS_SUMMARY,), ())
HOST_API_SUMMARY_CSV = CsvView("host_api_summary.csv", (HOST_API_SUMMARY,), ("rank_id", "step_ordinal"))
EVIDENCE_INDEX_CSV = CsvView("evidence_index.csv", (EVIDENCE_INDEX,), ("rank_id",))
COMMUNICATION_SUMMARY_CSV = CsvView("communication_summary.csv", (COMMUNICATION_OPS,), ("rank_id",))
COMMUNICATION_LINKS_CSV = CsvView("communication_links.csv", (COMMUNICATION_LINKS,), ("rank_id",))
