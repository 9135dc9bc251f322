"""Each link's bandwidth against its comparable links: what slow_link_suspected judges in one root and
what the sweep joins across roots (fleet link suspects).

A link is one direction between two ranks of a communication group, for one op kind over one transport,
read from communication_matrix.json's whole-op rows (tier ``total``). Comparable links are those of the
same group, op kind and transport: in one collective they carry the same kind of traffic.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

LINK_KEYS = ["group_hash", "parallel_role", "op_kind", "transport", "src_local_rank", "dst_local_rank"]
# what link_bandwidths reads of the communication_links table
LINK_INPUT_COLUMNS = ("rank_id", "tier", *LINK_KEYS, "bandwidth_gbps", "op_name", "size_mb")
COMPARABLE = ["group_hash", "op_kind", "transport"]


def global_ends(group_ranks: dict[str, list[int]], group_hash: object, local: pd.Series) -> np.ndarray:
    """Global ranks of a group's local ranks (``group_ranks``: group hash → its members in order); a
    group without parallel_group_info keeps its local ranks, which then stand for themselves."""
    ranks = group_ranks.get(str(group_hash))
    if not ranks:
        return local.to_numpy(np.int64)
    table = np.asarray(ranks, dtype=np.int64)
    return np.where(local < len(table), table[np.minimum(local, len(table) - 1)], local)


def link_bandwidths(links: pd.DataFrame, group_ranks: dict[str, list[int]]) -> pd.DataFrame:
    """One row per link (``LINK_KEYS``) with its median bandwidth over its ops (``bandwidth``), how many
    ops (``ops``), their median size, the rank that reported it first (``reporter``, ``op_name``), the
    median of its comparable links (``median``), how many there are (``peers``), its ``ratio`` to that
    median and its global ends (``src``, ``dst``). Self links and zero bandwidths are not links."""
    whole = links[(links["tier"] == "total") & (links["src_local_rank"] != links["dst_local_rank"])]
    whole = whole[whole["bandwidth_gbps"] > 0]
    columns = [*LINK_KEYS, "bandwidth", "ops", "size", "reporter", "op_name", "median", "peers", "ratio", "src", "dst"]
    if whole.empty:
        return pd.DataFrame(columns=columns)
    per_link = (
        whole.groupby(LINK_KEYS, dropna=False)
        .agg(
            bandwidth=("bandwidth_gbps", "median"),
            ops=("op_name", "size"),
            size=("size_mb", "median"),
            reporter=("rank_id", "first"),
            op_name=("op_name", "first"),
        )
        .reset_index()
    )
    comparable = per_link.groupby(COMPARABLE, dropna=False)["bandwidth"]
    per_link["median"] = comparable.transform("median")
    per_link["peers"] = comparable.transform("size")
    per_link["ratio"] = per_link["bandwidth"] / per_link["median"]
    per_link["src"], per_link["dst"] = per_link["src_local_rank"], per_link["dst_local_rank"]
    for group, part in per_link.groupby("group_hash", dropna=False, sort=False):  # one per group: few
        per_link.loc[part.index, "src"] = global_ends(group_ranks, group, part["src_local_rank"])
        per_link.loc[part.index, "dst"] = global_ends(group_ranks, group, part["dst_local_rank"])
    per_link[["src", "dst"]] = per_link[["src", "dst"]].astype(np.int64)
    return per_link[columns]
