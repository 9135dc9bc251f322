"""graph_padding_waste: decode forwards replayed from full graphs captured for bigger batches than theirs.

A full graph runs its layers on the batch size it was captured for; a decode of fewer requests is padded
up to it (forward_summary's ``padded_tokens``, from the LM head's rows against the attention's). What the
padding costs is measured from the capture itself: a full graph replays the same kernels in the same order
at every size, so each kernel's median duration at each size the rank replayed is a yardstick of that
kernel against the batch. A padded forward's kernel would have cost what that yardstick reads at the
forward's real batch (interpolated between the replayed sizes, never below the smallest: a capture says
nothing of batches smaller than it ran); the rest is the padding's. Kernels whose time follows the KV
cache rather than the batch (the attention: a padding slot holds no KV) are left out, and so are the
collectives (their padded bytes are not charged). Priced by replaying the forwards with each kernel cut to
its real batch's cost.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from npuprof.pipeline import schema
from npuprof.pipeline.evidence_ids import step_evidence_id
from npuprof.pipeline.io import int_ranks
from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, priced, rule
from npuprof.pipeline.stages.diagnostics.rank_kernels import scan_kernels_in_steps
from npuprof.pipeline.stages.diagnostics.registry import derived_input, detector
from npuprof.pipeline.stages.diagnostics.retiming import StepModel, WhatIf, close_windows, scaled_transit, summed

if TYPE_CHECKING:
    from npuprof.pipeline.stages.base import RootContext

REPLAY_COLUMNS = ["rank_id", "step_ordinal", "tokens", "size", "position", "type", "start_ns", "duration_us"]


def padded_replays(forwards: pd.DataFrame) -> pd.DataFrame:
    """The full-graph decodes of ``forwards`` (forward_summary rows) whose real batch is known: rank_id,
    step_ordinal, start_ns, end_ns, tokens (the real batch) and size (the graph's, padding included)."""
    full = forwards[(forwards["graph_mode"] == "full") & (forwards["phase"] == "decode")]
    full = full[full["padded_tokens"].notna() & full["tokens"].notna()]
    size = full["tokens"].astype("int64") + full["padded_tokens"].astype("int64")
    return full.assign(tokens=full["tokens"].astype("int64"), size=size)[
        ["rank_id", "step_ordinal", "start_ns", "end_ns", "tokens", "size"]
    ]


def _replayed_kernels(forwards: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """One rank's replayed kernels (``events``: type, start_ns, end_ns, model_id) inside ``forwards`` (its
    padded_replays), each with its forward and its position among the forward's replayed kernels."""
    events = events[events["model_id"].notna()].sort_values("start_ns", kind="stable")
    forwards = forwards.sort_values("start_ns")
    start = events["start_ns"].to_numpy(np.int64)
    at = np.searchsorted(forwards["start_ns"].to_numpy(np.int64), start, side="right") - 1
    inside = (at >= 0) & (start <= forwards["end_ns"].to_numpy(np.int64)[np.clip(at, 0, None)])
    mine = forwards.iloc[at[inside]]
    found = pd.DataFrame(
        {
            "step_ordinal": mine["step_ordinal"].to_numpy(np.int64),
            "tokens": mine["tokens"].to_numpy(np.int64),
            "size": mine["size"].to_numpy(np.int64),
            "type": events["type"].to_numpy(object)[inside],
            "start_ns": start[inside],
            "duration_us": (events["end_ns"].to_numpy(np.int64)[inside] - start[inside]) / 1e3,
        }
    )
    return found.assign(position=found.groupby("step_ordinal").cumcount())


@derived_input("padded_forwards")
def padded_forwards(ctx: RootContext) -> pd.DataFrame:
    """padded_replays of every rank's forwards (empty for a capture without full-graph decodes)."""
    forwards = ctx.read_frame(schema.FORWARD_SUMMARY)
    if forwards.empty or "padded_tokens" not in forwards:
        return pd.DataFrame(columns=["rank_id", "step_ordinal", "start_ns", "end_ns", "tokens", "size"])
    return padded_replays(int_ranks(forwards))


@derived_input("graph_replays")
def graph_replays(ctx: RootContext) -> pd.DataFrame:
    """The replayed compute kernels of every rank's full-graph decodes whose padding forward_summary tells
    (REPLAY_COLUMNS): empty for a capture without such forwards."""
    replays = padded_forwards(ctx)
    if replays.empty:
        return pd.DataFrame(columns=REPLAY_COLUMNS)
    scanned = scan_kernels_in_steps(
        ctx,
        ["type", "start_ns", "end_ns", "model_id"],
        lambda rank, events: _replayed_kernels(replays[replays["rank_id"] == rank], events),
        ranks=set(int(r) for r in replays["rank_id"]),
    )
    parts = [kernels.assign(rank_id=rank) for rank, kernels in scanned if len(kernels)]
    return pd.concat(parts, ignore_index=True)[REPLAY_COLUMNS] if parts else pd.DataFrame(columns=REPLAY_COLUMNS)


def same_graph(kernels: pd.DataFrame) -> pd.DataFrame:
    """The kernels of the forwards that replayed the kernel types most of their rank's forwards replayed, in
    the same order: one graph's sequence at every size. A forward of another sequence (a size whose graph
    the compiler built from other kernels) is no yardstick of it, and the position of a kernel in it names
    another kernel: it is left out, never compared."""
    codes = pd.Series(pd.factorize(kernels["type"])[0], index=kernels.index)
    keys = [kernels["rank_id"], kernels["step_ordinal"]]
    signature = codes.groupby(keys).agg(lambda forward: hash(tuple(forward)))  # a loop over forwards
    usual = signature.groupby(level="rank_id").agg(lambda forward: forward.mode().iloc[0])
    same = signature == usual.reindex(signature.index.get_level_values("rank_id")).to_numpy()
    kept = pd.MultiIndex.from_frame(kernels[["rank_id", "step_ordinal"]]).isin(signature.index[same.to_numpy()])
    return kernels[kept]


def padding_cost(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per kernel of ``kernels`` (graph_replays of one rank's forwards that replay one sequence), what its
    forward's padding cost it: its duration beyond the yardstick's reading at the forward's real batch
    (``waste_us``), with the yardstick's reading at the graph's size and at the real batch. The yardstick
    is each position's median duration at each replayed size, read linearly between sizes and flat below
    the smallest; a rank that replayed one size only has none (``waste_us`` 0)."""
    medians = kernels.groupby(["position", "size"])["duration_us"].median().unstack("size").sort_index(axis=1)
    sizes = medians.columns.to_numpy(np.int64)
    table = medians.to_numpy(float)
    row = medians.index.get_indexer(kernels["position"])
    at_size = table[row, np.searchsorted(sizes, kernels["size"].to_numpy(np.int64))]
    if len(sizes) < 2:
        return kernels.assign(at_size_us=at_size, at_real_us=at_size, waste_us=0.0)
    real = kernels["tokens"].to_numpy(float)
    low = np.clip(np.searchsorted(sizes, real, side="right") - 1, 0, len(sizes) - 2)
    weight = np.clip((real - sizes[low]) / (sizes[low + 1] - sizes[low]), 0.0, 1.0)
    at_real = table[row, low] * (1.0 - weight) + table[row, low + 1] * weight
    share = np.clip(1.0 - np.divide(at_real, at_size, out=np.ones_like(at_real), where=at_size > 0), 0.0, 1.0)
    waste = np.nan_to_num(kernels["duration_us"].to_numpy(float) * share)
    return kernels.assign(at_size_us=at_size, at_real_us=at_real, waste_us=waste)


def _costs(kernels: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """padding_cost over every rank, the kernels the batch does not drive (``kv_bound_types``) at 0."""
    kernels = same_graph(kernels)
    costed = pd.concat([padding_cost(part) for _, part in kernels.groupby("rank_id")], ignore_index=True)
    kv_bound = costed["type"].isin(spec["kv_bound_types"]).to_numpy()
    return costed.assign(waste_us=np.where(kv_bound, 0.0, costed["waste_us"].to_numpy(float)))


def _collective_costs(model: StepModel, forwards: pd.DataFrame, ranks: list[int]) -> pd.DataFrame:
    """padding_cost of each collective instance inside a padded forward of ``ranks``, on each member rank of
    them, its transit read as a kernel's duration is (by position in the rank's forward), with its
    ``instance``."""
    if model.empty or model.rows.empty:
        return pd.DataFrame(columns=["rank_id", "step_ordinal", "instance", "duration_us", "waste_us"])
    rows = model.rows[model.rows["rank_id"].isin(ranks)].sort_values(["rank_id", "start_us"], kind="stable")
    instance = rows["instance"].to_numpy(np.int64)
    keyed = pd.DataFrame(
        {
            "rank_id": rows["rank_id"].to_numpy(np.int64),
            "step_ordinal": model.slots["step_ordinal"].to_numpy()[rows["slot"].to_numpy(np.int64)].astype(np.int64),
            "instance": instance,
            "duration_us": model.transit_us[instance],
        }
    ).merge(forwards[["rank_id", "step_ordinal", "tokens", "size"]], on=["rank_id", "step_ordinal"])
    if keyed.empty:
        return keyed.assign(waste_us=pd.Series(dtype=float))
    keyed = keyed.assign(position=keyed.groupby(["rank_id", "step_ordinal"]).cumcount())
    return pd.concat([padding_cost(part) for _, part in keyed.groupby("rank_id")], ignore_index=True)


def _transit_change(model: StepModel, collectives: pd.DataFrame) -> WhatIf:
    """Each instance of ``collectives`` (_collective_costs) with its transit cut by its padding's share (as
    its first member rank reads it: every member's transit is the instance's)."""
    collectives = collectives.drop_duplicates("instance")
    transit = collectives["duration_us"].to_numpy(float)
    waste = collectives["waste_us"].to_numpy(float)
    factor = 1.0 - np.divide(waste, transit, out=np.zeros_like(transit), where=transit > 0)
    ids = model.instance_ids[collectives["instance"].to_numpy(np.int64)] if len(collectives) else []
    return scaled_transit(model, pd.Series(factor, index=ids, dtype=float))


# a size's real batches are listed up to this many, else given as their range: a real server runs dozens
# of batch sizes under one graph, which would make the finding's sentence a list of numbers
BATCHES_LISTED = 4


def sizes_text(costed: pd.DataFrame) -> str:
    """Each replayed size with the real batches padded to it: '16 (12), 64 (42, 62), 256 (92)'; a size with
    more than BATCHES_LISTED of them as their range: '256 (129–250, 37 batch sizes)'."""
    pairs = costed[["size", "tokens"]].drop_duplicates().sort_values(["size", "tokens"])
    texts = []
    for size, group in pairs.groupby("size", sort=True):  # a loop over the sizes replayed
        batches = group["tokens"].tolist()
        listed = ", ".join(map(str, batches))
        ranged = f"{batches[0]}–{batches[-1]}, {len(batches)} batch sizes"
        texts.append(f"{size} ({listed if len(batches) <= BATCHES_LISTED else ranged})")
    return ", ".join(texts)


def _other_graphs(forwards: pd.DataFrame, compared: pd.DataFrame, ranks: list[int], spec: dict) -> list[str]:
    """The limitation naming the padded forwards of ``ranks`` left out for replaying another sequence."""
    padded = forwards[forwards["rank_id"].isin(ranks) & (forwards["size"] > forwards["tokens"])]
    left_out = len(padded) - len(padded.merge(compared[["rank_id", "step_ordinal"]]))
    return [spec["other_graph_limitation"].format(count=left_out)] if left_out else []


def _kernel_windows(kernels: pd.DataFrame) -> pd.DataFrame:
    """The padding's time of each costed kernel as a window at its start (rank_id, start_us, duration_us)."""
    kernels = kernels[kernels["waste_us"] > 0]
    return pd.DataFrame(
        {
            "rank_id": kernels["rank_id"],
            "start_us": kernels["start_ns"].to_numpy(np.int64) / 1000.0,
            "duration_us": kernels["waste_us"],
        }
    )


def _padded_forwards(kernels: pd.DataFrame, collectives: pd.DataFrame) -> pd.DataFrame:
    """Per padded forward (rank_id, step_ordinal): tokens, size and the padding's µs in its kernels and
    its collectives' transit, costliest first."""
    per_forward = kernels.groupby(["rank_id", "step_ordinal"]).agg(
        waste_us=("waste_us", "sum"), tokens=("tokens", "first"), size=("size", "first")
    )
    carried = collectives.groupby(["rank_id", "step_ordinal"])["waste_us"].sum()
    per_forward["waste_us"] += carried.reindex(per_forward.index, fill_value=0.0)
    padded = per_forward[per_forward["size"] > per_forward["tokens"]]
    return padded.sort_values("waste_us", ascending=False)


@detector(
    finding_types=("graph_padding_waste",),
    reads={
        "graph_replays": (),
        "padded_forwards": (),
        "steps": ("rank_id", "step_ordinal", "wall_ms"),
        "step_model": (),
    },
)
def graph_padding_waste(inputs: DiagnosisContext) -> list[Finding]:
    """One finding over the ranks whose padded full-graph decodes spend at least ``share_min`` of the
    ranks' wall on the padding (their kernels' and collectives'), measured by the capture's own replays
    of each size; a rank that replayed one size has no yardstick and is not judged."""
    spec = rule("graph_padding_waste")
    if inputs.graph_replays.empty:
        return []
    model, kernels = inputs.step_model, _costs(inputs.graph_replays, spec)
    measured = kernels.groupby("rank_id")["size"].nunique()
    ranks = [int(r) for r in measured.index[measured >= 2]]
    kernels = kernels[kernels["rank_id"].isin(ranks)]
    compared = inputs.padded_forwards.merge(kernels[["rank_id", "step_ordinal"]].drop_duplicates())
    collectives = _collective_costs(model, compared, ranks)
    padded = _padded_forwards(kernels, collectives)
    wall = inputs.steps.groupby("rank_id")["wall_ms"].sum()
    per_rank = padded.groupby("rank_id")["waste_us"].sum() / 1000.0
    share = per_rank / wall.reindex(per_rank.index)
    ranks = [int(r) for r in share.index[share >= spec["share_min"]]]
    if not ranks:
        return []
    padded = padded[padded.index.get_level_values("rank_id").isin(ranks)]
    change = summed(
        model,
        [
            close_windows(model, _kernel_windows(kernels[kernels["rank_id"].isin(ranks)]), kernels=True),
            _transit_change(model, collectives[collectives["rank_id"].isin(ranks)]),
        ],
    )
    return [
        Finding(
            finding_type="graph_padding_waste",
            scope="rank",
            rank_ids=ranks,
            evidence_ids=[step_evidence_id(r, o) for r, o in padded.index],
            statistic={
                "name": "graph_padding_share",
                "value": float(share[ranks].min()),
                "threshold": float(spec["share_min"]),
                "test": "padded decodes' kernel and collective time beyond their real batch's (the capture's "
                "replays of each size), share of the ranks' wall",
            },
            values={
                "ranks": ", ".join(map(str, ranks)),
                "count": int(len(padded)),
                "sizes": sizes_text(kernels[kernels["rank_id"].isin(ranks)]),
                "padded_share": float((padded["size"] - padded["tokens"]).sum() / padded["size"].sum()),
                "us_per_forward": float(padded["waste_us"].mean()),
                "share": float(per_rank[ranks].sum() / wall[ranks].sum()),
            },
            limitations=[spec["kept_out_limitation"].format(types=", ".join(spec["kv_bound_types"]))]
            + _other_graphs(inputs.padded_forwards, compared, ranks, spec),
            **priced(model, change),
        )
    ]
