"""What the per-rank parts of summarize, evidence and model read alike: the rank's steps in order,
the span of each step's layers, and the step each event falls in (by segment's positions)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof.pipeline import schema
from npuprof.pipeline.segmentation.windows import window_positions
from npuprof.pipeline.stages.base import RankContext
from npuprof.pipeline.summaries.classes import events_in_blocks

BLOCK_COLUMNS = ["pos_start", "pos_end", "layer_ordinal", "block_kind", "block_class_id"]


def rank_steps(ctx: RankContext) -> pd.DataFrame:
    """The rank's step segments by step ordinal."""
    steps = ctx.read_table(schema.STEP_SEGMENTS).to_pandas()
    return steps.sort_values("step_ordinal").reset_index(drop=True)


def layer_spans(ctx: RankContext) -> pd.DataFrame:
    """step_ordinal, main_start_ns, main_end_ns: the span of each step's layers (steps with layers)."""
    layers = ctx.read_table(schema.LAYER_SEGMENTS, columns=["step_ordinal", "start_ns", "end_ns"]).to_pandas()
    spans = layers.groupby("step_ordinal").agg(main_start_ns=("start_ns", "min"), main_end_ns=("end_ns", "max"))
    return spans.reset_index()


def step_of_events(event_count: int, steps: pd.DataFrame) -> np.ndarray:
    """The step ordinal of each event in device order, NaN for events outside every step."""
    ordinal = np.full(event_count, np.nan)
    positions, step = window_positions(steps["pos_start"].to_numpy(), steps["pos_end"].to_numpy())
    ordinal[positions] = steps["step_ordinal"].to_numpy()[step]
    return ordinal


def add_block_columns(ctx: RankContext, events: pd.DataFrame) -> None:
    """The layer and block (ordinal, kind, class) each event of ``events`` (device order) sits in, added
    as columns in place: no copy of the other columns."""
    blocks = ctx.read_table(schema.BLOCK_SEGMENTS, columns=BLOCK_COLUMNS).to_pandas()
    for column, values in events_in_blocks(len(events), blocks).items():
        events[column] = values.to_numpy() if values.dtype.kind == "f" else values.array
