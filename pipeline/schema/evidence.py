"""The evidence stage's tables: idle windows and the host's gaps, the idle time by cause, the host API
summary, the evidence index, and the step time accounting CSV with its idle causes."""

from __future__ import annotations

import pyarrow as pa

from npuprof.pipeline.schema.summarize import STEP_TIME_ACCOUNTING
from npuprof.pipeline.schema.table import CsvView, Table

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
            ("copy_us", pa.float64()),
            ("compile_us", pa.float64()),
            ("sync_us", pa.float64()),
            ("dataloader_us", pa.float64()),
            ("gc_us", pa.float64()),
            ("allocation_us", pa.float64()),
            ("launch_us", pa.float64()),
            ("unattributed_us", pa.float64()),
        ]
    ),
)
# The device's memory copies inside the rank's steps (MEMCPY_ASYNC tasks, from trace_view.json's device
# lanes or the db's TASK table): what idle time of cause "copy" is made of
DEVICE_COPIES = Table(
    "device_copies",
    pa.schema(
        [
            ("step_ordinal", pa.int64()),
            ("start_ns", pa.int64()),
            ("end_ns", pa.int64()),
            ("duration_us", pa.float64()),
            ("bytes", pa.float64()),  # null where the capture does not say (a db export)
            ("direction", pa.string()),  # "host to device", "device to host", … (null in a db export)
            ("stream_id", pa.int64()),
        ]
    ),
)
# HCCL's data moves inside the rank's steps (the Memcpy / Reduce_Inline … tasks of its collectives'
# planes, from trace_view.json's HCCL lanes or the db's COMMUNICATION_TASK_INFO): what each moved, over
# what, in how long
HCCL_TASKS = Table(
    "hccl_tasks",
    pa.schema(
        [
            ("step_ordinal", pa.int64()),
            ("start_ns", pa.int64()),
            ("end_ns", pa.int64()),
            ("duration_us", pa.float64()),
            ("task_type", pa.string()),  # Memcpy, Reduce_Inline, RDMASend …
            ("plane", pa.int64()),  # its Plane lane (trace_view's thread id; the db's planeId + 1)
            ("transport", pa.string()),  # SDMA | RDMA
            ("link_type", pa.string()),  # ON_CHIP | HCCS | PCIE | ROCE | SIO …
            ("bytes", pa.float64()),
        ]
    ),
)
# What chosen framework ops (evidence_rules.framework_scopes: SyncBatchNorm) put on the device: each kernel the
# host launched inside such an op's span, with the span
LAUNCH_SCOPES = Table(
    "launch_scopes",
    pa.schema(
        [
            ("step_ordinal", pa.int64()),
            ("scope", pa.string()),  # the configured scope the span's name holds
            ("span_start_ns", pa.int64()),  # the framework op's span on the host (one call)
            ("span_end_ns", pa.int64()),
            ("row_idx", pa.int64()),  # the kernel: its normalized event row
            ("start_ns", pa.int64()),  # ... and its device start
            ("name", pa.string()),
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
STEP_TIME_ACCOUNTING_CSV = CsvView("step_time_accounting.csv", (STEP_TIME_ACCOUNTING,), ("rank_id", "step_ordinal"))
HOST_API_SUMMARY_CSV = CsvView("host_api_summary.csv", (HOST_API_SUMMARY,), ("rank_id", "step_ordinal"))
EVIDENCE_INDEX_CSV = CsvView("evidence_index.csv", (EVIDENCE_INDEX,), ("rank_id",))
