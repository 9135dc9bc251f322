"""cross_rank's tables: collective instances matched across ranks on a common clock, and the
alignment of collectives, steps and layers.

Times are µs. ``corrected_*`` times are on the common clock: a rank's own clock minus its estimated
offset (cross_rank_manifest.json holds the offsets).
"""

from __future__ import annotations

import pyarrow as pa

from npuprof.pipeline.schema.table import CsvView, Table

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
