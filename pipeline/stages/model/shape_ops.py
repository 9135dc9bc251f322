"""Per rank: one row per distinct kernel + shapes + dtypes, with its FLOPs; and the FLOPs of each step."""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof.pipeline.distinct import combined_codes, first_rows
from npuprof.pipeline.stages.model.flops import shape_flops

SHAPE_KEY = [
    "name",
    "type",
    "op_type",
    "input_shapes",
    "input_dtypes",
    "input_formats",
    "output_shapes",
    "output_dtypes",
]


def shape_operators(events: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """(shape ops of one rank, the shape op of each event).

    ``events``: the rank's labelled events with their ``block_kind`` and ``layer_ordinal`` (null
    outside layers). The block kind of a shape op is the one most of its calls sit in.
    """
    # numbered as groupby(sort=False).ngroup() numbers them (first appearance), on dictionary codes: no
    # per-row text is hashed or compared
    codes = combined_codes([events[column] for column in SHAPE_KEY])[0]
    count = int(codes.max()) + 1 if len(codes) else 0
    first = first_rows(codes, count)
    ops = events[SHAPE_KEY].iloc[first].reset_index(drop=True).fillna("").replace("", None)
    ops["primary_category"] = events["primary_category"].iloc[first].to_numpy() if count else []
    ops["call_count"] = np.bincount(codes, minlength=count)
    ops["duration_sum_us"] = np.bincount(codes, weights=events["duration_ns"].to_numpy(float), minlength=count) / 1e3
    in_layer = events["layer_ordinal"].notna().to_numpy()
    ops["layer_call_count"] = np.bincount(codes[in_layer], minlength=count)
    rows = events["row_idx"].to_numpy()
    ops["row_start"] = rows[first] if count else []
    row_end = np.full(count, -1, dtype=np.int64)
    np.maximum.at(row_end, codes, rows)
    ops["row_end"] = row_end
    ops["block_kind"] = _top_block_kind(events["block_kind"], codes, count)
    ops = pd.concat([ops, shape_flops(ops)], axis=1)
    return ops, codes


def _top_block_kind(kinds: pd.Series, codes: np.ndarray, count: int) -> np.ndarray:
    """The block kind most calls of each shape op sit in (None when none sits in a block)."""
    top = np.full(count, None, dtype=object)
    present = kinds.notna().to_numpy()
    if not present.any():
        return top
    pairs = pd.DataFrame({"op": codes[present], "kind": kinds[present].array})
    counted = pairs.value_counts().reset_index(name="n").sort_values(["op", "n"], ascending=[True, False])
    winners = counted.drop_duplicates("op")
    top[winners["op"].to_numpy()] = winners["kind"].to_numpy()
    return top


def step_flops(events: pd.DataFrame, codes: np.ndarray, ops: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per step: cube and vector FLOPs counted from shapes, bytes moved, and how much cube time they cover."""
    step = events["step_ordinal"].to_numpy()
    inside = ~np.isnan(step)
    if not len(steps) or not inside.any():
        return pd.DataFrame()
    ordinal = step[inside].astype(np.int64)
    size = int(steps["step_ordinal"].max()) + 1
    calls = codes[inside]  # each call's shape op: its values are looked up per op, then per call
    duration = events["duration_ns"].to_numpy(float)[inside] / 1e3
    cube = (ops["flops_kind"] == "cube").to_numpy(bool)[calls]
    vector = (ops["flops_kind"] == "vector").to_numpy(bool)[calls]
    flops = ops["flops_per_call"].fillna(0).to_numpy()[calls]
    cube_kernel = np.isin(events["op_type"].to_numpy()[inside], ("aic", "mix_cv"))
    counted_cube = cube_kernel & cube & (flops > 0)

    def total(mask: np.ndarray, weights: np.ndarray) -> np.ndarray:
        return np.bincount(ordinal[mask], weights=weights[mask], minlength=size)

    frame = pd.DataFrame(
        {
            "step_ordinal": np.arange(size),
            "cube_flops": total(cube, flops),
            "vector_flops": total(vector, flops),
            "bytes_moved": total(np.ones(len(ordinal), bool), ops["bytes_per_call"].fillna(0).to_numpy()[calls]),
            "cube_kernel_us": total(cube_kernel, duration),
            "cube_kernel_us_with_flops": total(counted_cube, duration),
        }
    )
    frame = frame.merge(steps[["step_ordinal", "step_id"]], on="step_ordinal", how="inner")
    return frame[["step_ordinal", "step_id", *frame.columns.drop(["step_ordinal", "step_id"])]]
