"""What differs on a slow card: the same measures of the slow rank and of its peers side by side.

Every rank gets one profile, per step of its complete steps (all its steps when none is complete):
its wall and its own time (the wall less exposed communication, where its waits for others sit);
its time by category (compute, exposed communication, overlap, idle); each compute operator's
time; its idle time the host caused; and its compute kernels' time and cycles (cycles count work,
not time: a slower clock stretches the time, not the cycles).
A slow rank is compared with the median of its peers (the other ranks that hold as many layers per
step, else all others): the ratio of each measure, the ms it adds per step, and the share of the
rank's extra own time that explains (``slow_rank_diff.csv`` and the slow-rank finding's words).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from npuprof.pipeline import schema
from npuprof.pipeline.idle_cause_names import QUEUED
from npuprof.pipeline.io import int_ranks
from npuprof.pipeline.stages.diagnostics.registry import derived_input

if TYPE_CHECKING:
    from npuprof.pipeline.stages.base import RootContext
    from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext

# the measures in the order the table lists them, and how the finding names them
LEVELS = ("step", "time", "operator", "idle_cause", "compute_work")
HOST_BOUND_SHARE = 0.5  # host-caused idle explaining this share of the extra own time: host-bound
CLOCK_RATIO_TOLERANCE = 0.05  # cycles within this of the peers': the same work
DIFF_COLUMNS = ["rank_id", "peer_ranks", "level", "key", "value", "peer_median", "ratio", "extra", "share_of_extra"]


@derived_input("compute_work")
def compute_work(ctx: RootContext) -> pd.DataFrame:
    """Per rank and step: its compute kernels' time (ms) and cycles (millions), over the kernels
    that record cycles (rank_id, step_id, compute_ms, mcycles)."""
    columns = ["step_id", "op_type", "duration_ns", "aic_total_cycles", "aiv_total_cycles"]
    if not (ctx.out_dir / schema.NORMALIZED_EVENTS).exists():
        return pd.DataFrame(columns=["rank_id", "step_id", "compute_ms", "mcycles"])
    events = int_ranks(ctx.read_table(schema.NORMALIZED_EVENTS, columns=columns).to_pandas())
    cycles = events["aic_total_cycles"].fillna(0.0) + events["aiv_total_cycles"].fillna(0.0)
    kept = (events["op_type"] != "communication").to_numpy() & (cycles > 0).to_numpy()
    work = pd.DataFrame(
        {
            "rank_id": events["rank_id"].to_numpy()[kept],
            "step_id": events["step_id"].to_numpy()[kept],
            "compute_ms": events["duration_ns"].to_numpy(float)[kept] / 1e6,
            "mcycles": cycles.to_numpy(float)[kept] / 1e6,
        }
    )
    return work.groupby(["rank_id", "step_id"], as_index=False)[["compute_ms", "mcycles"]].sum()


def _counted(steps: pd.DataFrame) -> pd.DataFrame:
    complete = steps["complete"].astype(bool)
    return steps[complete | ~complete.groupby(steps["rank_id"]).transform("any")]


def _per_step(frame: pd.DataFrame, counted: pd.DataFrame, keys: list[str], value: str, level: str) -> pd.DataFrame:
    """``value`` summed per rank and ``keys`` over the counted steps, per counted step."""
    on = [c for c in ("rank_id", "step_ordinal", "step_id") if c in frame.columns and c in counted.columns]
    mine = frame.merge(counted[on].drop_duplicates(), on=on)
    total = mine.groupby(["rank_id", *keys])[value].sum().reset_index()
    count = counted.groupby("rank_id").size()
    key = total[keys].astype(str).agg(" ".join, axis=1) if len(total) else pd.Series(dtype=object)
    return pd.DataFrame(
        {
            "rank_id": total["rank_id"],
            "level": level,
            "key": key,
            "value": total[value] / total["rank_id"].map(count),
        }
    )


CARD_PROFILE_READS = {
    "steps": ("rank_id", "step_ordinal", "step_id", "complete", "wall_ms", "main_layer_count"),
    "accounting": ("rank_id", "step_ordinal", "step_id", "breakdown", "category", "ms"),
    "operators": ("rank_id", "name", "op_type", "duration_sum_us"),
    "idle_by_cause": (),
    "compute_work": (),
}


def card_profile(inputs: DiagnosisContext) -> pd.DataFrame:
    """Every rank's measures per counted step: rank_id, level, key, value (ms; compute_work also in
    millions of cycles)."""
    steps = inputs.steps
    if steps.empty:
        return pd.DataFrame(columns=["rank_id", "level", "key", "value"])
    counted = _counted(steps)
    accounting = inputs.accounting
    primary = accounting[accounting["breakdown"] == "primary"]
    # the rank's own time: its wall less exposed communication, where the waits for others sit
    own = primary[primary["category"] != "communication"].assign(key="own time")
    own_time = _per_step(own, counted, ["key"], "ms", "step")
    operators = inputs.operators[inputs.operators["op_type"] != "communication"]
    all_steps = steps.groupby("rank_id").size()
    parts = [
        _per_step(counted.assign(key="wall"), counted, ["key"], "wall_ms", "step"),
        _per_step(primary, counted, ["category"], "ms", "time"),
        own_time,
        pd.DataFrame(
            {
                "rank_id": operators["rank_id"],
                "level": "operator",
                "key": operators["name"].astype(str),
                "value": operators["duration_sum_us"] / 1000.0 / operators["rank_id"].map(all_steps),
            }
        ),
        _host_caused(inputs.idle_by_cause, counted),
        _per_step(inputs.compute_work.assign(key="compute ms"), counted, ["key"], "compute_ms", "compute_work"),
        _per_step(inputs.compute_work.assign(key="Mcycles"), counted, ["key"], "mcycles", "compute_work"),
    ]
    return pd.concat([p for p in parts if p is not None and len(p)], ignore_index=True)


def _host_caused(idle_by_cause: pd.DataFrame, counted: pd.DataFrame) -> pd.DataFrame | None:
    """Idle ms per step the host caused (every cause but queued), 0 on a traced rank without any;
    None where no rank has a host trace."""
    if idle_by_cause.empty:
        return None
    traced = counted[counted["rank_id"].isin(idle_by_cause["rank_id"].unique())]
    host = idle_by_cause[idle_by_cause["component"] != QUEUED].assign(key="host-caused")
    found = _per_step(host, traced, ["key"], "ms", "idle_cause").set_index("rank_id")["value"]
    ranks = traced["rank_id"].unique()
    return pd.DataFrame(
        {
            "rank_id": ranks,
            "level": "idle_cause",
            "key": "host-caused",
            "value": found.reindex(ranks, fill_value=0.0).to_numpy(),
        }
    )


def peers_of(steps: pd.DataFrame, rank: int) -> list[int]:
    """The ranks to compare ``rank`` with: those holding as many layers per step, else all others."""
    layers = steps.groupby("rank_id")["main_layer_count"].median()
    others = [int(r) for r in layers.index if r != rank]
    same = [r for r in others if layers.get(r) == layers.get(rank)]
    return same or others


def slow_card_diff(profile: pd.DataFrame, rank: int, peers: list[int]) -> pd.DataFrame:
    """``rank``'s measures against its peers' median: ratio, extra per step and the share of the
    rank's extra own time each explains (a measure only the rank has counts its whole value)."""
    if profile.empty or not peers:
        return pd.DataFrame(columns=DIFF_COLUMNS)
    mine = profile[profile["rank_id"] == rank].set_index(["level", "key"])["value"]
    theirs = (
        profile[profile["rank_id"].isin(peers)]
        .pivot_table(index=["level", "key"], columns="rank_id", values="value", aggfunc="sum")
        .reindex(columns=peers)
        .fillna(0.0)
        .median(axis=1)
    )
    both = pd.concat([mine.rename("value"), theirs.rename("peer_median")], axis=1).fillna(0.0)
    extra_own = both["value"].get(("step", "own time"), 0.0) - both["peer_median"].get(("step", "own time"), 0.0)
    both["ratio"] = both["value"] / both["peer_median"].where(both["peer_median"] > 0, np.nan)
    both["extra"] = both["value"] - both["peer_median"]
    both["share_of_extra"] = both["extra"] / extra_own if extra_own > 0 else np.nan
    both = both.reset_index()
    both["level"] = pd.Categorical(both["level"], LEVELS, ordered=True)
    both = both.sort_values(["level", "extra"], ascending=[True, False], kind="stable")
    both.insert(0, "peer_ranks", " ".join(map(str, peers)))
    both.insert(0, "rank_id", rank)
    return both.assign(level=both["level"].astype(str))[DIFF_COLUMNS].reset_index(drop=True)


def _ratio_of(diff: pd.DataFrame, level: str, key: str) -> float | None:
    row = diff[(diff["level"] == level) & (diff["key"] == key)]
    return None if row.empty or pd.isna(row["ratio"].iloc[0]) else float(row["ratio"].iloc[0])


def what_differs(diff: pd.DataFrame) -> str:
    """The finding's words on ``diff``: clock or work, the measure that explains most of the extra
    time, and the host's part; empty where nothing can be said."""
    if diff.empty:
        return ""
    parts = []
    compute, cycles = _ratio_of(diff, "compute_work", "compute ms"), _ratio_of(diff, "compute_work", "Mcycles")
    if compute is not None and cycles is not None:
        cause = "a slower clock" if abs(cycles - 1.0) <= CLOCK_RATIO_TOLERANCE else "more work per step"
        parts.append(
            f"its compute kernels take {compute:.2f}x its peers' time for {cycles:.2f}x their cycles ({cause})"
        )
    top = diff[(diff["level"] == "operator") & (diff["extra"] > 0)].head(1)
    if len(top) and pd.notna(top["share_of_extra"].iloc[0]):
        row = top.iloc[0]
        ratio = "only on it" if pd.isna(row["ratio"]) else f"{row['ratio']:.2f}x"
        share = f"{row['share_of_extra']:.0%} of its extra time"
        parts.append(f"{row['key']} {ratio} (+{row['extra']:.2f} ms per step, {share})")
    host = diff[(diff["level"] == "idle_cause") & (diff["key"] == "host-caused")]
    if len(host):
        row = host.iloc[0]
        bound = "host-bound" if row["share_of_extra"] >= HOST_BOUND_SHARE else "device-bound"
        parts.append(f"host-caused idle {row['value']:.2f} vs {row['peer_median']:.2f} ms per step ({bound})")
    return "; what differs on it: " + "; ".join(parts) if parts else ""
