"""Collectives, steps and layers across ranks on the common clock.

For each collective instance: who arrived first and last, and how long each member waited for the
last one (``late_by_us``: the wait the slowest arrival imposed). For each step id and each layer of
it: the start / end skew between ranks, and whether the ranks even ran the same structure.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof.pipeline import schema
from npuprof.pipeline.joined_text import joined_per_key
from npuprof.pipeline.summaries.communication import SPLIT_SOURCES

HIGH_SKEW_US = 5_000.0  # step alignment confidence: high below this start skew (with ≥ 4 members)
MEDIUM_SKEW_US = 20_000.0


# per aligned unit: the earliest / latest corrected start and end, and the duration spread
SPAN_AGGREGATES = {
    "start_min": ("corrected_start_us", "min"),
    "start_max": ("corrected_start_us", "max"),
    "end_min": ("corrected_end_us", "min"),
    "end_max": ("corrected_end_us", "max"),
    "duration_min_us": ("duration_us", "min"),
    "duration_max_us": ("duration_us", "max"),
}


def _with_members(units: pd.DataFrame, members: pd.DataFrame, key: str) -> pd.DataFrame:
    """``units`` with the first and last member to start (corrected clock) and the member list."""
    order = members.sort_values("corrected_start_us", kind="stable").groupby(key)["rank_id"]
    return units.assign(first_rank=order.first(), last_rank=order.last(), rank_ids=_joined_ranks(members, key))


def _on_common_clock(frame: pd.DataFrame, offsets_ns: pd.Series) -> pd.DataFrame:
    """``frame`` (rank_id, start_ns, end_ns) with corrected start / end and duration in µs."""
    shift = offsets_ns.reindex(frame["rank_id"].astype(np.int64).to_numpy()).fillna(0.0).to_numpy()
    return frame.assign(
        corrected_start_us=(frame["start_ns"] - shift) / 1000.0,
        corrected_end_us=(frame["end_ns"] - shift) / 1000.0,
        duration_us=(frame["end_ns"] - frame["start_ns"]) / 1000.0,
    )


def _joined_ranks(frame: pd.DataFrame, key: str) -> pd.Series:
    """``"0;3;5"``: the ranks of each unit, ascending, indexed by unit."""
    pairs = frame[["rank_id", key]].drop_duplicates()
    codes, units = pd.factorize(pairs[key], sort=True)
    ranks = pairs["rank_id"].to_numpy(np.int64)
    order = np.lexsort((ranks, codes))
    order = order[codes[order] >= 0]  # a unit without a key joins nothing
    return pd.Series(joined_per_key(codes[order], ranks[order], len(units)), index=units)


def corrected(instances: pd.DataFrame, offsets_ns: pd.Series) -> pd.DataFrame:
    """Instances on the common clock with arrival order and the wait each member had for the last one."""
    shift = offsets_ns.reindex(instances["rank_id"].to_numpy()).fillna(0.0).to_numpy()
    # the kernel's own wait column (time queued on its stream) is not the collective's wait
    frame = instances.drop(columns=["wait_us"], errors="ignore").assign(
        start_us=instances["start_ns"] / 1000.0,
        end_us=instances["end_ns"] / 1000.0,
        corrected_start_us=(instances["start_ns"] - shift) / 1000.0,
        corrected_end_us=(instances["end_ns"] - shift) / 1000.0,
    )
    by_instance = frame.groupby("alignment_id")["corrected_start_us"]
    frame["arrival_order"] = by_instance.rank(method="first").astype(np.int64) - 1
    late = by_instance.transform("max") - frame["corrected_start_us"]
    frame["late_by_us"] = np.minimum(late.clip(lower=0.0), frame["duration_us"])
    return frame


def with_communication_split(frame: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    """Add the analyzer's transit / wait (µs: communication.json or analysis.db) of the same op on the
    same rank, where present."""
    if ops.empty or "op_name" not in ops:
        return frame.assign(transit_us=np.nan, wait_us=np.nan)
    from_json = ops[ops["source"].isin(SPLIT_SOURCES)]
    split = pd.DataFrame(
        {
            "rank_id": from_json["rank_id"].astype(np.int64),
            "step_id": from_json["step_id"],
            "op_name": from_json["op_name"],
            "start_us": from_json["start_us"],
            "transit_us": from_json["transit_ms"] * 1000.0,
            "wait_us": from_json["wait_ms"] * 1000.0,
        }
    )
    split = split.sort_values(["rank_id", "start_us"], kind="stable")
    split["occurrence"] = split.groupby(["rank_id", "step_id", "op_name"], dropna=False).cumcount()
    split = split.rename(columns={"op_name": "name"}).drop(columns=["start_us"])
    keyed = frame.assign(rank_id=frame["rank_id"].astype(np.int64))
    if keyed["step_id"].isna().all():  # matched over the capture: the op's k-th call overall
        split = split.assign(occurrence=split.groupby(["rank_id", "name"]).cumcount()).drop(columns="step_id")
        return keyed.merge(split.drop_duplicates(["rank_id", "name", "occurrence"]), how="left")
    split = split.drop_duplicates(["rank_id", "step_id", "name", "occurrence"])
    return keyed.merge(split, on=["rank_id", "step_id", "name", "occurrence"], how="left")


def collective_units(frame: pd.DataFrame) -> pd.DataFrame:
    """One alignment row per collective instance with ≥ 2 members."""
    matched = frame[frame["member_count"] >= 2]
    if matched.empty:
        return pd.DataFrame(columns=schema.CROSS_RANK_ALIGNMENT.columns)
    grouped = matched.groupby("alignment_id", sort=False)
    units = grouped.agg(
        step_id=("step_id", "first"),
        name=("name", "first"),
        kind=("kind", "first"),
        parallel_role=("parallel_role", "first"),
        member_count=("member_count", "first"),
        **SPAN_AGGREGATES,
    )
    units = _with_members(units, matched, "alignment_id")
    return _finish_units(units.reset_index(), "collective")


def _finish_units(units: pd.DataFrame, kind: str) -> pd.DataFrame:
    units["alignment_type"] = kind
    units["start_skew_us"] = units.pop("start_max") - units.pop("start_min")
    units["end_skew_us"] = units.pop("end_max") - units.pop("end_min")
    low = units["duration_min_us"]
    units["duration_ratio"] = np.where(low > 0, units["duration_max_us"] / low.where(low > 0, 1.0), np.nan)
    skew = units["start_skew_us"]
    units["confidence"] = np.select(
        [(units["member_count"] >= 4) & (skew <= HIGH_SKEW_US), skew <= MEDIUM_SKEW_US], ["high", "medium"], "low"
    )
    for column in schema.CROSS_RANK_ALIGNMENT.columns:
        if column not in units:
            units[column] = None
    if "is_structure_mismatch" in units:
        units["confidence"] = np.where(units["is_structure_mismatch"].fillna(False), "low", units["confidence"])
    return units[list(schema.CROSS_RANK_ALIGNMENT.columns)]


def step_units(steps: pd.DataFrame, offsets_ns: pd.Series) -> pd.DataFrame:
    """One alignment row per step id that ≥ 2 ranks ran (steps: step_segments with wall and layer counts)."""
    frame = steps[steps["step_id"].notna()]
    if frame.empty:
        return pd.DataFrame(columns=schema.CROSS_RANK_ALIGNMENT.columns)
    frame = _on_common_clock(frame, offsets_ns)
    grouped = frame.groupby("step_id", sort=True)
    units = grouped.agg(
        member_count=("rank_id", "nunique"),
        **SPAN_AGGREGATES,
        layer_kinds=("main_layer_count", "nunique"),
    )
    units = _with_members(units, frame, "step_id")
    units["is_structure_mismatch"] = units.pop("layer_kinds") > 1
    units = units[units["member_count"] >= 2].reset_index()
    units["alignment_id"] = "s" + units["step_id"].astype(np.int64).astype(str)
    return _finish_units(units, "step")


def layer_units(layers: pd.DataFrame, offsets_ns: pd.Series) -> pd.DataFrame:
    """One alignment row per (step id, layer ordinal) over ranks that ran the step's usual layer count."""
    frame = layers[layers["step_id"].notna()].copy()
    if frame.empty:
        return pd.DataFrame(columns=schema.CROSS_RANK_ALIGNMENT.columns)
    per_rank = frame.groupby(["step_id", "rank_id"]).size().rename("layers").reset_index()
    usual = (
        per_rank.groupby(["step_id", "layers"])
        .size()
        .rename("ranks")
        .reset_index()
        .sort_values(["step_id", "ranks", "layers"], ascending=[True, False, False], kind="stable")
        .drop_duplicates("step_id")
    )
    members = per_rank.merge(usual[["step_id", "layers"]], on=["step_id", "layers"])[["step_id", "rank_id"]]
    frame = _on_common_clock(frame.merge(members, on=["step_id", "rank_id"]), offsets_ns)
    grouped = frame.groupby(["step_id", "layer_ordinal"], sort=True)
    units = grouped.agg(
        member_count=("rank_id", "nunique"),
        **SPAN_AGGREGATES,
    )
    units = units[units["member_count"] >= 2].reset_index()
    units["alignment_id"] = (
        "l" + units["step_id"].astype(np.int64).astype(str) + "." + units["layer_ordinal"].astype(str)
    )
    return _finish_units(units, "layer")
