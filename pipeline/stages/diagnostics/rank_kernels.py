"""Each rank's AI Core / vector kernels inside its steps, read one rank at a time with the filter pushed
down: what the per-kernel detectors scan (block dims, unfused chains), and the span of each rank's steps
they and the clock check read within."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pandas as pd
import pyarrow.compute as pc

from npuprof.pipeline import schema
from npuprof.pipeline.io import int_ranks
from npuprof.pipeline.kernel_categories import AICORE_OP_TYPES

if TYPE_CHECKING:
    from npuprof.pipeline.stages.base import RootContext


def step_spans(steps: pd.DataFrame) -> pd.DataFrame:
    """Per rank (rows with rank_id, start_ns, end_ns): from its first step's start to its last step's end."""
    return steps.groupby("rank_id", as_index=False).agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"))


def in_start_order(events: pd.DataFrame) -> pd.DataFrame:
    """``events`` by start, ties in their order, on a fresh index: normalize writes a rank's events so, and
    a check costs a fraction of a sort."""
    if events["start_ns"].is_monotonic_increasing:
        return events.reset_index(drop=True)
    return events.sort_values("start_ns", kind="stable", ignore_index=True)


def kernels_in_steps(
    ctx: RootContext,
    columns: list[str],
    ranks: set[int] | None = None,
    where: pc.Expression | None = None,
    op_types: tuple[str, ...] | None = AICORE_OP_TYPES,
) -> Iterator[tuple[int, pd.DataFrame]]:
    """(rank, its AI Core / vector kernels — its device tasks of ``op_types``, every task when None —
    starting inside its steps' span: ``columns``, and ``where`` holds) for each rank with steps (of
    ``ranks`` when given), in rank order."""
    steps = int_ranks(ctx.read_table(schema.STEP_SEGMENTS, columns=["start_ns", "end_ns"]).to_pandas())
    for rank, first, last in step_spans(steps).itertuples(index=False):  # a loop over ranks
        if ranks is not None and rank not in ranks:
            continue
        found = (
            (pc.field("rank_id") == int(rank))
            & (pc.field("start_ns") >= int(first))
            & (pc.field("start_ns") < int(last))
        )
        if op_types is not None:
            found &= pc.field("op_type").isin(list(op_types))
        found = found if where is None else found & where
        yield int(rank), ctx.read_table(schema.NORMALIZED_EVENTS, columns=columns, filter=found).to_pandas()
