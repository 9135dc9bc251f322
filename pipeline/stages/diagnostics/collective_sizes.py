"""The collective instances the per-collective checks read: each rank's instances (cross_rank's
collective_alignment) with what each op's busiest transport moved (communication.json's bandwidth table),
and how a size reads."""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof.pipeline.summaries.op_parts import LINK_SIZE_COLUMNS, op_size_mb

FAMILY = ["parallel_role", "kind"]  # the communicators' role and the op kind: what is compared with what
# the alignment columns ``sized_ops`` keeps, and the communication_ops columns it reads sizes from
INSTANCE_COLUMNS = (
    "alignment_id",
    "rank_id",
    "step_id",
    "name",
    "kind",
    "parallel_role",
    "member_count",
    "start_us",
    "end_us",
    "transit_us",
    "evidence_id",
)
SIZE_COLUMNS = ("rank_id", "op_name", *LINK_SIZE_COLUMNS)


def op_sizes(comm_ops: pd.DataFrame) -> pd.DataFrame:
    """Per rank and op name (``name``, as collective_alignment names it): ``size_mb`` and ``transport`` of
    its busiest transport (op_parts.op_size_mb)."""
    sizes = pd.concat([comm_ops[["rank_id", "op_name"]], op_size_mb(comm_ops)], axis=1)
    return sizes.drop_duplicates(["rank_id", "op_name"]).rename(columns={"op_name": "name"})


def sized_ops(alignment: pd.DataFrame, comm_ops: pd.DataFrame) -> pd.DataFrame:
    """Each rank's collective instances (alignment rows of two or more members) with what their busiest
    transport moved (``size_mb``, ``transport``) and their transit in µs, in rank and start order."""
    ops = alignment[alignment["member_count"] >= 2].merge(op_sizes(comm_ops), on=["rank_id", "name"], how="left")
    ops["parallel_role"] = ops["parallel_role"].fillna("unknown").astype(str)
    return ops.sort_values(["rank_id", "start_us"], kind="stable").reset_index(drop=True)


def size_classes(size_mb: pd.Series) -> np.ndarray:
    """Each size's class: log2 of its MB, floored — sizes within a factor of two share it (NaN: unknown)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        classes = np.floor(np.log2(size_mb.to_numpy(float)))
    return np.where(np.isfinite(classes), classes, np.nan)


def size_words(size_mb: float) -> str:
    """A transfer's size as people read it: 4 B, 12.5 KB, 3.2 MB."""
    size = size_mb * 1e6
    return f"{size:.0f} B" if size < 1e3 else f"{size / 1e3:.1f} KB" if size < 1e6 else f"{size_mb:.1f} MB"
