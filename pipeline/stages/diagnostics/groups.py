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
