"""cross_rank's tables: collective instances matched across ranks on a common clock, the alignment
of collectives, steps and layers, the HCCL tables with rank skew, and every rank's communication
ops and links in one CSV each.

Times are µs. ``corrected_*`` times are on the common clock: a rank's own clock minus its estimated
offset (cross_rank_manifest.json holds the offsets).
"""

from __future__ import annotations

import pyarrow as pa

from npuprof.pipeline.schema.summarize import COMMUNICATION_LINKS, COMMUNICATION_OPS
from npuprof.pipeline.schema.table import CsvView, Table

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
HCCL_OP_SUMMARY_CSV = CsvView("hccl_op_summary.csv", (HCCL_OP_SUMMARY,), ())
HCCL_CLASS_SUMMARY_CSV = CsvView("hccl_class_summary.csv", (HCCL_CLASS_SUMMARY,), ())
COMMUNICATION_SUMMARY_CSV = CsvView("communication_summary.csv", (COMMUNICATION_OPS,), ("rank_id",))
COMMUNICATION_LINKS_CSV = CsvView("communication_links.csv", (COMMUNICATION_LINKS,), ("rank_id",))
COLLECTIVE_ALIGNMENT = Table(
    "collective_alignment",
    pa.schema(
        [
            ("alignment_id", pa.string()),  # c<k>: one collective instance, the same on every member rank
            ("rank_id", pa.int32()),
            ("step_id", pa.int64()),  # null when the ranks' steps carry no ids (matched over the capture)
            ("name", pa.string()),
            ("kind", pa.string()),  # allreduce | allgather | ... | send_recv
            ("parallel_role", pa.string()),
            ("occurrence", pa.int64()),  # k-th instance of this name on the rank within the step
            ("member_count", pa.int64()),  # ranks that ran this instance
            ("evidence_id", pa.string()),  # the rank's communication_op evidence
            ("start_us", pa.float64()),  # the rank's own clock
            ("end_us", pa.float64()),
            ("corrected_start_us", pa.float64()),
            ("corrected_end_us", pa.float64()),
            ("duration_us", pa.float64()),
            ("arrival_order", pa.int64()),  # 0: the first rank to arrive
            ("late_by_us", pa.float64()),  # how long after this rank the last member arrived (it waited)
            ("transit_us", pa.float64()),  # communication.json's split where the rank has it
            ("wait_us", pa.float64()),
            ("compute_beside_us", pa.float64()),  # the rank's compute beside it (communication_events)
        ]
    ),
    per_rank=False,
)
CROSS_RANK_ALIGNMENT = Table(
    "cross_rank_alignment",
    pa.schema(
        [
            ("alignment_id", pa.string()),  # c<k> (collective) | s<step_id> (step) | l<step_id>.<layer> (layer)
            ("alignment_type", pa.string()),  # collective | step | layer
            ("step_id", pa.int64()),
            ("layer_ordinal", pa.int64()),
            ("name", pa.string()),
            ("kind", pa.string()),
            ("parallel_role", pa.string()),
            ("member_count", pa.int64()),
            ("rank_ids", pa.string()),  # ';'-joined
            ("start_skew_us", pa.float64()),  # corrected: max - min over the members
            ("end_skew_us", pa.float64()),
            ("duration_min_us", pa.float64()),
            ("duration_max_us", pa.float64()),
            ("duration_ratio", pa.float64()),  # max / min
            ("first_rank", pa.int64()),  # the rank that arrived (started) first / last
            ("last_rank", pa.int64()),
            ("is_structure_mismatch", pa.bool_()),  # steps: members differ in layer count
            ("confidence", pa.string()),  # high | medium | low
        ]
    ),
    per_rank=False,
)
CROSS_RANK_ALIGNMENT_CSV = CsvView("cross_rank_alignment.csv", (CROSS_RANK_ALIGNMENT,), ())
