"""Class summaries: per block, layer and step class over all its members (all ranks): wall
statistics, communication share and bound of blocks, block-kind shares of layers, anatomy and top
layer classes of steps."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from npuprof.pipeline.schema import PIPELINE_FIELDS
from npuprof.pipeline.segmentation.windows import window_positions
from npuprof.pipeline.summaries.bound import bound_labels
from npuprof.pipeline.summaries.communication import COMMUNICATION_OP_TYPES, call_families

TOP = 5


def events_in_blocks(event_count: int, blocks: pd.DataFrame) -> pd.DataFrame:
    """Per event of a rank (device order): the layer_ordinal, block_kind and block_class_id of the
    block it sits in (null outside every block), from the blocks' positions."""
    block_of = np.full(event_count, -1, dtype=np.int64)
    positions, block = window_positions(blocks["pos_start"].to_numpy(), blocks["pos_end"].to_numpy())
    block_of[positions] = block
    outside = block_of < 0
    layer = blocks["layer_ordinal"].to_numpy(np.float64)[np.where(outside, 0, block_of)] if len(blocks) else block_of
    # text columns are taken on the Arrow side: no Python string per event
    take = pa.array(block_of, mask=outside)
    texts = {
        name: pc.take(pa.array(blocks[name], pa.string()), take).to_pandas()
        for name in ("block_kind", "block_class_id")
    }
    return pd.DataFrame({"layer_ordinal": np.where(outside, np.nan, layer), **texts})


def block_class_ops(events: pd.DataFrame) -> pd.DataFrame:
    """Per (block class, kernel, op type) of one rank: calls, time and pipeline sums (``events``
    carry their block_class_id, see ``events_in_blocks``)."""
    columns = ["block_class_id", "name", "op_type", "duration_ns", *PIPELINE_FIELDS]
    frame = events.loc[events["block_class_id"].notna().to_numpy(), columns]  # only the columns it sums
    grouped = frame.groupby(["block_class_id", "name", "op_type"], sort=False)
    table = grouped.agg(call_count=("duration_ns", "size"), duration_us=("duration_ns", "sum"))
    table["duration_us"] = table["duration_us"] / 1000.0
    sums = grouped[list(PIPELINE_FIELDS)].sum(min_count=1).add_suffix("_sum")
    return table.join(sums).reset_index()


def _decimals(values) -> np.ndarray:
    return np.char.mod("%.3f", np.asarray(values, dtype=float)).astype(object)


def _wall_stats(frame: pd.DataFrame, key: str) -> pd.DataFrame:
    grouped = frame.groupby(key, sort=False)
    return pd.DataFrame(
        {
            "member_count": grouped.size(),
            "rank_count": grouped["rank_id"].nunique(),
            "has_unknown_shape": grouped["has_unknown_shape"].first().astype(bool),
            "wall_ms_sum": grouped["wall_ms"].sum(),
            "wall_ms_mean": grouped["wall_ms"].mean(),
            "wall_ms_p50": grouped["wall_ms"].quantile(0.5),
            "wall_ms_p90": grouped["wall_ms"].quantile(0.9),
            "busy_ms_mean": grouped["busy_ms"].mean(),
            "bubble_ms_mean": grouped["underfeed_ms"].mean(),
        }
    )


def _top(frame: pd.DataFrame, key: str, label: str, value: str, per: pd.Series) -> pd.Series:
    """ "label=value;..." of the TOP largest values per key (value divided by ``per`` of the key)."""
    ranked = frame.sort_values(value, ascending=False, kind="stable").groupby(key, sort=False).head(TOP)
    per_member = ranked[value].to_numpy() / per.reindex(ranked[key]).to_numpy()
    items = ranked[label].astype(str) + "=" + pd.Series(_decimals(per_member), index=ranked.index)
    return items.groupby(ranked[key], sort=False).agg(";".join)


def block_class_summary(blocks: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    """One row per block class: wall statistics, communication share, bound of its compute, top kernels."""
    key = "block_class_id"
    table = _wall_stats(blocks, key)
    table["block_kind"] = blocks.groupby(key, sort=False)["block_kind"].first()
    table["layer_role"] = blocks.groupby(key, sort=False)["layer_role"].first()
    comm = ops[ops["op_type"].isin(COMMUNICATION_OP_TYPES)].groupby(key)["duration_us"].sum() / 1000.0
    table["comm_ms_mean"] = comm.reindex(table.index).fillna(0.0) / table["member_count"]
    # an op on another stream can run on past its block's end (its wall stops at the next event): the
    # share counts at most the block's wall
    comm_total = np.minimum(table["comm_ms_mean"] * table["member_count"], table["wall_ms_sum"])
    table["comm_share_mean"] = np.where(table["wall_ms_sum"] > 0, comm_total / table["wall_ms_sum"], 0.0)
    compute = ops[~ops["op_type"].isin(COMMUNICATION_OP_TYPES)]
    stages = compute.groupby(key)[[f"{f}_sum" for f in PIPELINE_FIELDS]].sum(min_count=1)
    stages = stages.rename(columns=lambda c: c[: -len("_sum")]).reindex(table.index)
    table = table.join(bound_labels(pd.Series("aic", index=stages.index), stages))
    # an HCCL call's name is its own (a call counter): the calls of one kind in one group rank together
    by_name = ops.assign(name=call_families(ops["name"])).groupby([key, "name"], as_index=False)["duration_us"].sum()
    by_name["ms"] = by_name["duration_us"] / 1000.0
    table["top_ops"] = _top(by_name, key, "name", "ms", table["member_count"]).reindex(table.index)
    return table.reset_index().sort_values("wall_ms_sum", ascending=False, kind="stable")


def layer_class_summary(layer_classes: pd.DataFrame, blocks: pd.DataFrame) -> pd.DataFrame:
    """One row per layer class: wall statistics and the mean wall share of each block kind."""
    key = "layer_class_id"
    table = _wall_stats(layer_classes, key)
    table["layer_role"] = layer_classes.groupby(key, sort=False)["layer_role"].first()
    table["block_kinds"] = layer_classes.groupby(key, sort=False)["block_kinds"].first()
    members = ["rank_id", "step_ordinal", "layer_ordinal"]
    kind_wall = blocks.groupby([*members, "block_kind"], as_index=False)["wall_ms"].sum()
    kind_wall = kind_wall.merge(layer_classes[[*members, key, "wall_ms"]], on=members, suffixes=("", "_layer"))
    kind_wall["share"] = np.where(kind_wall["wall_ms_layer"] > 0, kind_wall["wall_ms"] / kind_wall["wall_ms_layer"], 0)
    shares = kind_wall.groupby([key, "block_kind"])["share"].mean().reset_index()
    items = shares["block_kind"].astype(str) + "=" + pd.Series(_decimals(shares["share"]), index=shares.index)
    text = items.groupby(shares[key], sort=False).agg(";".join)
    table["block_kind_wall_share_mean"] = text.reindex(table.index)
    return table.reset_index().sort_values("wall_ms_sum", ascending=False, kind="stable")


def step_class_summary(step_classes: pd.DataFrame, anatomy: pd.DataFrame, layer_classes: pd.DataFrame) -> pd.DataFrame:
    """One row per step class: wall statistics, head / main / tail means, bubble ratio, top layer classes."""
    key = "step_class_id"
    table = _wall_stats(step_classes, key)
    table["complete"] = step_classes.groupby(key, sort=False)["complete"].first().astype(bool)
    table["bubble_ratio_mean"] = step_classes.groupby(key, sort=False)["underfeed_ratio"].mean()
    steps = ["rank_id", "step_ordinal"]
    windows = anatomy.pivot_table(index=steps, columns="window", values="wall_ms", aggfunc="sum").reset_index()
    windows = windows.merge(step_classes[[*steps, key]], on=steps)
    for window in ("head", "main", "tail"):
        column = windows[window] if window in windows else pd.Series(0.0, index=windows.index)
        table[f"{window}_ms_mean"] = column.fillna(0.0).groupby(windows[key]).mean().reindex(table.index)
    layers = layer_classes.merge(step_classes[[*steps, key]], on=steps)
    by_class = layers.groupby([key, "layer_class_id"], as_index=False)["wall_ms"].sum()
    table["top_layer_classes"] = _top(by_class, key, "layer_class_id", "wall_ms", table["member_count"]).reindex(
        table.index
    )
    return table.reset_index().sort_values("wall_ms_sum", ascending=False, kind="stable")
