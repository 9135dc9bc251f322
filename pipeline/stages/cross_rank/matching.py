"""Collective instances matched across ranks by what they are, not by when they ran.

An HCCL op's name carries its group (``hcom_allReduce__170_…``: the group hash's last digits) and,
on real captures, its sequence in that group; the k-th call of one name inside one step is the same
collective on every rank of the group. Matching on (step id, name, k) survives any clock offset
between ranks, which absolute-time buckets do not.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

NO_STEP = -1  # the key of events outside every step (or of captures whose steps carry no ids)


def collective_instances(events: pd.DataFrame, step_ids: pd.DataFrame) -> tuple[pd.DataFrame, bool]:
    """Every communication event with its instance id (``alignment_id``), occurrence and member count.

    ``events``: communication_events of all ranks; ``step_ids``: (rank_id, step_ordinal, step_id) of
    step_segments. Returns (instances, matched_by_step): instances are keyed by (step id, name,
    occurrence) when every rank's steps carry ids, else by (name, occurrence) over the capture.
    """
    frame = events.assign(rank_id=events["rank_id"].astype(np.int64)).drop(columns=["step_id"], errors="ignore")
    ids = step_ids.assign(rank_id=step_ids["rank_id"].astype(np.int64), step_ordinal=step_ids["step_ordinal"])
    frame = frame.merge(ids[["rank_id", "step_ordinal", "step_id"]], on=["rank_id", "step_ordinal"], how="left")
    by_step = bool(len(ids)) and bool(ids["step_id"].notna().all())
    step_key = frame["step_id"].fillna(NO_STEP).astype(np.int64) if by_step else pd.Series(NO_STEP, index=frame.index)
    frame["step_key"] = step_key.to_numpy()
    frame = frame.sort_values(["rank_id", "start_ns"], kind="stable").reset_index(drop=True)
    frame["occurrence"] = frame.groupby(["rank_id", "step_key", "name"], sort=False).cumcount()
    instance = frame.groupby(["step_key", "name", "occurrence"], sort=True).ngroup()
    frame["alignment_id"] = "c" + instance.astype(str)
    frame["member_count"] = frame.groupby(instance)["rank_id"].transform("nunique")
    if not by_step:
        frame["step_id"] = frame["step_id"].where(frame["step_id"].notna(), None)
    return frame.drop(columns=["step_key"]), by_step


def rank_components(instances: pd.DataFrame) -> pd.Series:
    """Which ranks are tied together by shared collectives: component label (its lowest rank) per rank.

    Each instance links its members to its lowest member; the union-find runs over those distinct
    links (a few per group), never over events.
    """
    ranks = np.sort(instances["rank_id"].unique())
    parent = {int(r): int(r) for r in ranks}

    def find(rank: int) -> int:
        while parent[rank] != rank:
            parent[rank] = parent[parent[rank]]
            rank = parent[rank]
        return rank

    lowest = instances.groupby("alignment_id")["rank_id"].transform("min")
    links = pd.DataFrame({"a": instances["rank_id"], "b": lowest}).drop_duplicates()
    for a, b in links.itertuples(index=False):  # a loop over distinct (rank, group leader) links
        root_a, root_b = find(int(a)), find(int(b))
        if root_a != root_b:
            parent[max(root_a, root_b)] = min(root_a, root_b)
    return pd.Series({r: find(r) for r in parent}, name="component")
