"""Which collectives and communicator member sets the detectors compare ranks within."""

from __future__ import annotations

import pandas as pd

from npuprof import knowledge

STRUCTURAL_ROLES = ("DP", "TP", "EP", "CP")  # members of these groups run the same layers


def is_ep_collective(alignment: pd.DataFrame) -> pd.Series:
    """Which collective rows are expert-parallel: role EP, or a fused dispatch / combine kernel."""
    markers = knowledge.load("diagnosis_rules")["ep_collective_markers"]
    fused = alignment["name"].fillna("").str.contains("|".join(markers), regex=True)
    return (alignment["parallel_role"] == "EP") | fused


def structural_groups(units: pd.DataFrame) -> pd.DataFrame:
    """Distinct member sets (``rank_ids``, ';'-joined) of collectives per structural role."""
    collectives = units[(units["alignment_type"] == "collective") & units["parallel_role"].isin(STRUCTURAL_ROLES)]
    return collectives.drop_duplicates(["parallel_role", "rank_ids"])[["parallel_role", "rank_ids"]]


def members(rank_ids: object) -> list[int]:
    """The ranks of a ';'-joined member list."""
    return [int(r) for r in str(rank_ids).split(";")]


def group_members(ops: pd.DataFrame, links: pd.DataFrame, group_ranks: dict) -> pd.DataFrame:
    """Per group hash: its size (profiler_metadata's global ranks, else the local ranks
    communication_matrix names) and the captured ranks that ran its ops (group_hash, size, captured)."""
    if not len(ops):
        return pd.DataFrame(columns=["group_hash", "size", "captured"])
    captured = ops.groupby("group_hash")["rank_id"].agg(lambda r: sorted(set(int(x) for x in r)))
    local = (
        links.groupby("group_hash")[["src_local_rank", "dst_local_rank"]].max().max(axis=1) + 1
        if len(links)
        else pd.Series(dtype=float)
    )
    sizes = {
        group: len(group_ranks[group]) if group in group_ranks else local.get(group, len(members))
        for group, members in captured.items()
    }
    return pd.DataFrame(
        {"group_hash": captured.index, "size": [int(sizes[g]) for g in captured.index], "captured": captured.values}
    )


def incomplete_instances(alignment: pd.DataFrame, ops: pd.DataFrame, links: pd.DataFrame, group_ranks: dict) -> set:
    """The alignment ids of collective instances whose group has members the capture lacks: an op of a
    captured rank (alignment ``rank_id``, ``name``) named in communication.json (``ops``: rank_id,
    op_name, group_hash) in a group larger than the ranks that ran it here."""
    if not len(alignment) or not len(ops) or "name" not in alignment.columns:
        return set()
    sizes = group_members(ops, links, group_ranks)
    short = sizes[sizes["size"] > sizes["captured"].map(len)]["group_hash"]
    named = ops[ops["group_hash"].isin(set(short))][["rank_id", "op_name"]].drop_duplicates()
    hits = alignment.merge(named, left_on=["rank_id", "name"], right_on=["rank_id", "op_name"])
    return set(hits["alignment_id"].astype(str))
