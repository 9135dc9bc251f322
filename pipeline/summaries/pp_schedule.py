"""The pipeline-parallel schedule read from the kernels: per rank and step, its stage, the order of
its forward / backward passes per micro-batch, its compute, its exposed P2P wait and its bubble
beside the bubble an ideal schedule of the same shape would have.

The vendor's pp_chart needs MSTX markers; here segment already knows each pass's direction
(``layer_segments.pass_index`` / ``direction``) and the capture's parallel groups say each rank's
stage (the group whose role is PP; its ``group_rank`` is the stage).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof.pipeline.summaries.communication import role_of
from npuprof.pipeline.summaries.gap_kinds import IDLE_BY_GAP, idle_gap_names

COLUMNS = [
    "rank_id",
    "step_ordinal",
    "step_id",
    "complete",
    "pp_group",  # the ranks of the rank's PP group, in stage order (';'-joined)
    "stage",
    "stages",
    "micro_batches",  # forward passes in the step
    "schedule",  # the passes in time order: F0 F1 B0 B1 (GPipe), F0 B0 F1 B1 (1F1B's last stage) ...
    "layers_held",  # distinct decoder layers this stage runs
    "layer_ms",  # mean wall of one held layer over the step's passes (its forward and backward)
    "wall_ms",
    "compute_ms",  # the compute kernels' busy time, communication beside them or not
    "pp_exposed_ms",  # P2P communication with no compute beside it: waiting for the neighbour stage
    "idle_ms",  # every idle gap, dispatch gaps between kernels included
    "pipeline_wait_ms",  # the idle gaps of at least idle_by_gap.gap_min_us beside a P2P op (gap_kinds.py)
    # the exposed wait of the tied embedding's all-reduce (the first and last stages sync it once both
    # finished their backward: the drain's wait, on the stage that finished first)
    "embedding_wait_ms",
    "bubble_ms",  # pp_exposed + pipeline_wait + embedding_wait: the stage waits for its neighbour
    "bubble_share",
    "ideal_bubble_share",  # (p - 1) / (m + p - 1): what GPipe / 1F1B of this shape leave idle
]


def pp_stages(capture_info: dict) -> pd.DataFrame:
    """rank_id, pp_group, stage, stages for every rank whose capture names a PP group of ≥ 2 ranks."""
    rows = []
    for rank in capture_info.get("ranks", []):  # a loop over ranks
        args = rank.get("distributed_args")
        for group in (rank.get("parallel_group_info") or {}).values():
            members = group.get("global_ranks") if isinstance(group, dict) else None
            if role_of(group, args) != "PP" or not isinstance(members, list) or len(members) < 2:
                continue
            rows.append(
                {
                    "rank_id": int(rank["rank_id"]),
                    "pp_group": ";".join(map(str, members)),
                    "stage": members.index(int(rank["rank_id"])) if int(rank["rank_id"]) in members else None,
                    "stages": len(members),
                }
            )
    return pd.DataFrame(rows, columns=["rank_id", "pp_group", "stage", "stages"]).dropna(subset=["stage"])


def pp_schedule(
    capture_info: dict, steps: pd.DataFrame, layers: pd.DataFrame, accounting: pd.DataFrame
) -> pd.DataFrame:
    """One row per (rank, step) of the ranks in a PP group (COLUMNS); empty without pipeline parallel.

    ``steps``: rank_id, step_ordinal, step_id, complete. ``layers``: layer_segments (rank_id,
    step_ordinal, pass_index, direction, layer_index, start_ns, end_ns). ``accounting``:
    step_time_accounting (primary and comm_by_role rows).
    """
    stages = pp_stages(capture_info)
    if stages.empty or layers.empty or accounting.empty:
        return pd.DataFrame(columns=COLUMNS)
    keys = ["rank_id", "step_ordinal"]
    frame = steps[[*keys, "step_id", "complete"]].merge(stages, on="rank_id")
    frame = frame.merge(_passes(layers), on=keys, how="left").merge(_time_split(accounting), on=keys, how="left")
    frame = frame[frame["micro_batches"] > 0]
    p, m = frame["stages"].astype(float), frame["micro_batches"].astype(float)
    frame["bubble_ms"] = frame["pp_exposed_ms"] + frame["pipeline_wait_ms"] + frame["embedding_wait_ms"]
    frame["bubble_share"] = frame["bubble_ms"] / frame["wall_ms"].where(frame["wall_ms"] > 0)
    frame["ideal_bubble_share"] = (p - 1) / (m + p - 1)
    return frame[COLUMNS].sort_values(keys).reset_index(drop=True)


def pass_spans(layers: pd.DataFrame) -> pd.DataFrame:
    """One row per pass of a rank's step (a micro-batch's forward or backward through the layers it
    holds): rank_id, step_ordinal, pass_index, direction, start_ns, end_ns and its label ("F0", "B1"),
    in time order."""
    passes = (
        layers.groupby(["rank_id", "step_ordinal", "pass_index"])
        .agg(direction=("direction", "first"), start_ns=("start_ns", "min"), end_ns=("end_ns", "max"))
        .reset_index()
        .sort_values(["rank_id", "step_ordinal", "start_ns"])
    )
    forward = passes["direction"] == "forward"
    # the k-th forward pass of a step is micro-batch k, and so is the k-th backward pass
    ordinal = passes.groupby(["rank_id", "step_ordinal", forward]).cumcount()
    passes["label"] = np.where(forward, "F", "B") + ordinal.astype(str)
    return passes.reset_index(drop=True)


def _passes(layers: pd.DataFrame) -> pd.DataFrame:
    """Per (rank, step): micro-batches, the F / B order, layers held and the mean layer wall."""
    passes = pass_spans(layers)
    per_step = passes.groupby(["rank_id", "step_ordinal"]).agg(
        schedule=("label", " ".join),
        forwards=("direction", lambda d: int((d == "forward").sum())),
        backwards=("direction", lambda d: int((d == "backward").sum())),
    )
    # a pass segment could not tell apart still ran: the micro-batches are the larger count
    per_step["micro_batches"] = per_step[["forwards", "backwards"]].max(axis=1)
    per_step = per_step.drop(columns=["forwards", "backwards"])
    held = (
        layers.assign(wall_ms=(layers["end_ns"] - layers["start_ns"]) / 1e6)
        .groupby(["rank_id", "step_ordinal"])
        .agg(layers_held=("layer_index", "nunique"), layers_ms=("wall_ms", "sum"))
    )
    held["layer_ms"] = held["layers_ms"] / held["layers_held"].where(held["layers_held"] > 0)
    return per_step.join(held[["layers_held", "layer_ms"]]).reset_index()


def _time_split(accounting: pd.DataFrame) -> pd.DataFrame:
    """Per (rank, step): wall, compute, exposed PP communication, idle, the idle that waits for the
    neighbour stage and the tied embedding sync's exposed wait (ms) from the accounting."""
    keys = ["rank_id", "step_ordinal"]
    primary = accounting[accounting["breakdown"] == "primary"]
    split = primary.pivot_table(index=keys, columns="category", values="ms", aggfunc="sum").reindex(
        columns=["compute", "overlap", "idle"], fill_value=0.0
    )
    wall = primary.groupby(keys)["wall_ms"].first()
    by_role = accounting[(accounting["breakdown"] == "comm_by_role") & (accounting["component"] == "PP")]
    pp = by_role.groupby(keys)["ms"].sum()
    gaps = accounting[
        (accounting["breakdown"] == IDLE_BY_GAP) & (accounting["component"] == idle_gap_names()["pipeline"])
    ]
    component = accounting["component"].astype(str)
    drain = component.str.startswith("EMBEDDING ") & component.str.endswith((" wait", " idle"))
    embedding = accounting[(accounting["breakdown"] == "comm_exposed_parts") & drain]
    return pd.DataFrame(
        {
            "wall_ms": wall,
            # a stage's compute load: under a gradient bucket's all-reduce it computes all the same
            "compute_ms": split["compute"] + split["overlap"],
            "pp_exposed_ms": pp.reindex(wall.index).fillna(0.0),
            "idle_ms": split["idle"],
            "pipeline_wait_ms": gaps.groupby(keys)["ms"].sum().reindex(wall.index).fillna(0.0),
            "embedding_wait_ms": embedding.groupby(keys)["ms"].sum().reindex(wall.index).fillna(0.0),
        }
    ).reset_index()
