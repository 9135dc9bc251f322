"""Which collectives ran on a communication stream of their own, and when a queued one was issued.

The replay (retiming.py) runs two chains per rank: its compute chain through the blocking
collectives, and its communication stream, where a floating op (a gradient bucket's all-reduce under
the backward) runs beside the compute. This module marks the floating ops from the measured step
and estimates when each queued op's rank issued it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

BESIDE = "compute_beside_us"  # optional alignment column: the rank's compute beside the op
BESIDE_SHARE_MIN = 0.5  # an op with its rank's compute beside it for this share of its life ran on a stream
FLOATING_SLACK_US = 1.0  # ns rounding: an op starting this close to the last one's end was queued behind it
MAX_QUEUED_CHAIN = 64  # ops queued one behind another on a stream that the model follows


def _last_floating_end(floating: np.ndarray, ends: np.ndarray, slot: np.ndarray) -> np.ndarray:
    """Per row: the end of the last floating row before it in its slot (NaN: none)."""
    previous = pd.Series(np.where(floating, ends, np.nan)).groupby(slot).shift()
    return previous.groupby(slot).ffill().to_numpy()


def with_streams(rows: pd.DataFrame, slots: pd.DataFrame) -> pd.DataFrame:
    """``rows`` (sorted by slot and start) with what the replay needs to run two chains per rank.

    An instance is ``floating`` when on some member its life holds another of that rank's collectives,
    start to end, or that rank's compute for at least half of it, or it starts as a floating op of that
    rank ends (queued behind it): it ran on a communication stream of its own (a gradient bucket's
    all-reduce under the backward), and blocking the rank it would hold back the ops beside it. The
    rank's compute chain runs through the blocking ops; the floating ones follow on its stream, each
    issued ``gap_us`` after the blocking op before it (``previous_row``, -1: the step's start), or
    ``queued`` behind the stream's previous op (it started as that one ended)."""
    rows = rows.reset_index(drop=True)
    slot = rows["slot"].to_numpy()
    ends, starts = rows["end_us"].to_numpy(float), rows["start_us"].to_numpy(float)
    # an op whose life holds another op of its rank, start to end, ran beside it on a stream of its own
    next_end = pd.Series(ends).groupby(slot).shift(-1).to_numpy()
    next_start = pd.Series(starts).groupby(slot).shift(-1).to_numpy()
    holds = (next_start > starts) & (next_end < ends - FLOATING_SLACK_US)
    # ... so did one its rank computed beside (a gradient bucket's all-reduce under the backward)
    if BESIDE in rows.columns:
        holds |= rows[BESIDE].fillna(0.0).to_numpy(float) >= BESIDE_SHARE_MIN * np.clip(ends - starts, 1e-9, None)
    floating = rows["alignment_id"].isin(set(rows.loc[holds, "alignment_id"])).to_numpy()
    for _ in range(MAX_QUEUED_CHAIN):  # an op that starts as a floating one ends was queued behind it
        stream_end = _last_floating_end(floating, ends, slot)
        behind = ~floating & (np.abs(starts - stream_end) <= FLOATING_SLACK_US)
        if not behind.any():
            break
        floating = rows["alignment_id"].isin(set(rows.loc[floating | behind, "alignment_id"])).to_numpy()
    blocking_at = pd.Series(np.where(floating, np.nan, np.arange(len(rows), dtype=float)))
    # the last blocking row before each row of its slot (the rows are in slot, start order)
    before = blocking_at.groupby(slot).shift().groupby(slot).ffill()
    previous = np.where(floating, blocking_at.groupby(slot).ffill(), before)
    previous = np.where(np.isnan(previous), -1, previous).astype(int)
    since = np.where(previous < 0, slots["start_us"].to_numpy(float)[slot], ends[np.clip(previous, 0, None)])
    stream_end = _last_floating_end(floating, ends, slot)
    queued = floating & (np.abs(starts - stream_end) <= FLOATING_SLACK_US)
    gap = np.clip(starts - since, 0.0, None)
    return rows.assign(
        floating=floating,
        queued=queued,
        previous_row=previous,
        gap_us=gap,
        issue_us=_queued_issue(rows["alignment_id"], floating, queued, previous, gap, slot, slots["head_us"]),
    )


def _queued_issue(
    ids: pd.Series,
    floating: np.ndarray,
    queued: np.ndarray,
    previous: np.ndarray,
    gap: np.ndarray,
    slot: np.ndarray,
    head_us: pd.Series,
) -> np.ndarray:
    """Per row, when its rank issued it, as time since ``previous_row`` ended (like ``gap_us``). A queued
    op started when its stream freed, not when issued: its issue is estimated as its rank's previous
    floating op's issue plus the spacing the members that were not queued show between the two (their
    compute between the issues), at the rank's own pace (how its issues compare with the other members'
    where none was queued: a slow rank issues late), at most its start; NaN where nothing shows it (then
    the replay starts it when its stream is free)."""
    issue = np.where(queued, np.nan, gap)
    order = np.arange(len(gap))
    before = pd.Series(np.where(floating, order, np.nan)).groupby(slot).shift().groupby(slot).ffill().to_numpy()
    before = np.where(np.isnan(before), -1, before).astype(int)
    # a pair with one origin (the same blocking op before both): their gaps differ by the compute between
    paired = floating & (before >= 0) & (previous == previous[np.clip(before, 0, None)])
    # the pace is compared where several members issued unqueued (alone, a rank is its own reference),
    # from each rank's first kernel (a stall before it delays the issues, it does not slow them)
    worked = gap - np.where(previous < 0, head_us.to_numpy(float)[slot], 0.0)
    own = floating & ~queued & (worked > 0)
    counted = pd.Series(worked[own]).groupby(ids.to_numpy()[own]).agg(["median", "size"])
    reference = counted.loc[counted["size"] >= 2, "median"]
    pace = pd.Series(worked[own] / ids[own].map(reference).to_numpy(float)).groupby(slot[own]).median()
    pace_of = pd.Series(slot).map(pace).to_numpy(float)
    seen = paired & ~queued & ~queued[np.clip(before, 0, None)] & ~np.isnan(pace_of)
    spacing = pd.Series((gap[seen] - gap[before[seen]]) / pace_of[seen]).groupby(ids.to_numpy()[seen]).median()
    step = ids.map(spacing).to_numpy(float) * pace_of
    for _ in range(MAX_QUEUED_CHAIN):  # a chain of queued ops, one link per pass
        ready = queued & paired & np.isnan(issue) & ~np.isnan(issue[np.clip(before, 0, None)]) & ~np.isnan(step)
        if not ready.any():
            break
        issue[ready] = np.minimum(gap[ready], issue[before[ready]] + step[ready])
    return issue
