"""classify's step anatomy: each step's head / main / tail windows (main spans the layers)."""

from __future__ import annotations

import pyarrow as pa

from npuprof.pipeline.schema.classes import WINDOW_METRICS
from npuprof.pipeline.schema.table import CsvView, Table

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
