"""Each rank's AI Core / vector kernels inside its steps, read with the filter pushed down and scanned a
rank per thread: what the per-kernel detectors scan (block dims, slow matmul calls, fusible and unfused
chains), and the span of each rank's steps they and the clock check read within."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from npuprof import knowledge
from npuprof.pipeline import schema
from npuprof.pipeline.distinct import map_distinct
from npuprof.pipeline.io import int_ranks
from npuprof.pipeline.kernel_categories import AICORE_OP_TYPES
from npuprof.pipeline.memory import rank_input_bytes, ranks_at_once
from npuprof.pipeline.stages.diagnostics.registry import derived_input

if TYPE_CHECKING:
    from npuprof.pipeline.stages.base import RootContext

T = TypeVar("T")


def step_spans(steps: pd.DataFrame) -> pd.DataFrame:
    """Per rank (rows with rank_id, start_ns, end_ns): from its first step's start to its last step's end."""
    return steps.groupby("rank_id", as_index=False).agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"))


def op_types(events: pd.DataFrame) -> np.ndarray:
    """Per kernel of ``events`` (name, type), its op type: the Type column, else the op an aclnn kernel's
    name gives (CANN names a kernel ``aclnn<Api>_<Impl>_<Type>``, a variant after it, so a capture without
    the Type column still says it: ``aclnnPowTensorScalar_PowsAiCore_Pows`` is a ``Pows``), else its name."""

    def named_type(name: object) -> object:
        parts = str(name).split("_")
        return parts[2] if str(name).startswith("aclnn") and len(parts) >= 3 else name

    named = map_distinct(events["name"].astype(object), named_type)
    return events["type"].astype(object).where(events["type"].notna(), named).to_numpy(object)


def in_start_order(events: pd.DataFrame) -> pd.DataFrame:
    """``events`` by start, ties in their order, on a fresh index: normalize writes a rank's events so, and
    a check costs a fraction of a sort."""
    if events["start_ns"].is_monotonic_increasing:
        return events.reset_index(drop=True)
    return events.sort_values("start_ns", kind="stable", ignore_index=True)


def scan_kernels_in_steps(
    ctx: RootContext,
    columns: list[str],
    scan: Callable[[int, pd.DataFrame], T],
    ranks: set[int] | None = None,
    where: pc.Expression | None = None,
    op_types: tuple[str, ...] | None = AICORE_OP_TYPES,
    dictionary: tuple[str, ...] = (),
) -> list[tuple[int, T]]:
    """(rank, ``scan(rank, kernels)``) for each rank with steps (of ``ranks`` when given), in rank order;
    ``kernels``: the rank's AI Core / vector kernels — its device tasks of ``op_types``, every task when
    None — starting inside its steps' span, ``columns`` of those ``where`` holds. A rank is read and scanned
    on a thread each, as many at once as there are cores and the memory holds ranks (``memory.ranks_at_once``):
    the Parquet read and the NumPy work over a rank's events release the GIL (the fusible chains of 8 ranks ×
    250 k events: 0.6–0.7× the wall on two).
    ``dictionary`` text columns come as categoricals (their codes, not a string per row: a rank's scan holds
    less while another runs beside it)."""
    spans = _spans(ctx, ranks)
    sizes = [rank_input_bytes(rank) for rank in ctx.inputs.ranks]
    threads = min(len(spans), ranks_at_once(sizes, os.cpu_count() or 1)) if sizes else 1

    def read_and_scan(span: tuple[int, int, int]) -> tuple[int, T]:
        rank, first, last = span
        return rank, scan(rank, _kernels(ctx, rank, first, last, columns, where, op_types, dictionary))

    if threads < 2:
        return [read_and_scan(span) for span in spans]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(read_and_scan, spans))


def _spans(ctx: RootContext, ranks: set[int] | None) -> list[tuple[int, int, int]]:
    """(rank, first step's start, last step's end) of each rank with steps (of ``ranks`` when given)."""
    steps = int_ranks(ctx.read_table(schema.STEP_SEGMENTS, columns=["start_ns", "end_ns"]).to_pandas())
    return [
        (int(rank), int(first), int(last))
        for rank, first, last in step_spans(steps).itertuples(index=False)  # a loop over ranks
        if ranks is None or rank in ranks
    ]


def _kernels(
    ctx: RootContext,
    rank: int,
    first: int,
    last: int,
    columns: list[str],
    where: pc.Expression | None,
    op_types: tuple[str, ...] | None,
    dictionary: tuple[str, ...] = (),
) -> pd.DataFrame:
    found = (pc.field("rank_id") == rank) & (pc.field("start_ns") >= first) & (pc.field("start_ns") < last)
    if op_types is not None:
        found &= pc.field("op_type").isin(list(op_types))
    found = found if where is None else found & where
    return ctx.read_table(schema.NORMALIZED_EVENTS, columns=columns, filter=found, dictionary=dictionary).to_pandas()


# what ``kernel_calls`` holds of each call
KERNEL_CALL_COLUMNS = [
    "rank_id",
    "name",
    "type",
    "start_ns",
    "end_ns",
    "input_shapes",
    "input_dtypes",
    "input_formats",
    "output_formats",
]


@derived_input("kernel_calls")
def kernel_calls(ctx: RootContext) -> pd.DataFrame:
    """Every call inside the ranks' steps of the kernel types a finding's rules list under
    ``kernel_types`` (TransData, say), one row each (KERNEL_CALL_COLUMNS): a detector that
    prices the calls of a few kernel types names them in its rules rather than scanning the ranks with
    an input of its own. A capture without the Type column names none of them."""
    findings = knowledge.load("diagnosis_rules")["findings"]
    types = sorted({kind for spec in findings.values() for kind in spec.get("kernel_types", ())})
    if not types:
        return pd.DataFrame(columns=KERNEL_CALL_COLUMNS)
    parts = [
        calls.assign(rank_id=rank)
        for rank, calls in scan_kernels_in_steps(
            ctx, KERNEL_CALL_COLUMNS[1:], lambda _, calls: calls, where=pc.field("type").isin(types)
        )
        if len(calls)
    ]
    return (
        pd.concat(parts, ignore_index=True)[KERNEL_CALL_COLUMNS] if parts else pd.DataFrame(columns=KERNEL_CALL_COLUMNS)
    )
