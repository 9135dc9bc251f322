"""unfused_loss_chain: a cross-entropy loss written as tensor arithmetic over the logits (cast to fp32,
max, subtract, exp, sum, divide, gather the target's logit, and in the backward scatter, scale, cast
back) where one fused cross-entropy would read the logits a few times in their own dtype.

The chain is anchored on a tensor, not on consecutive kernel types: a vocab-parallel loss interleaves its
kernels over the logits with small ones (the vocab-range masks, the target index) and the collectives of
the tensor-parallel group. Its kernels are those between two matmuls (the LM head's forward and its
backward) whose first input is the logits' shape (its unit dims aside), when one of them exponentiates
it and one gathers from or scatters into it. Only their time is priced; what lies between keeps its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pandas as pd

from npuprof.pipeline.distinct import map_distinct, text_codes
from npuprof.pipeline.modelinfo.shapes import compute_dtype, numel, parse_dtypes, parse_shapes
from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, rule
from npuprof.pipeline.stages.diagnostics.kernel_traffic import TRAFFIC_COLUMNS, kernel_traffic
from npuprof.pipeline.stages.diagnostics.rank_kernels import in_start_order, op_types, scan_kernels_in_steps
from npuprof.pipeline.stages.diagnostics.registry import derived_input, detector
from npuprof.pipeline.stages.diagnostics.step_scale import chain_claim, costly_chains, mean_step_wall_ms, steps_per_rank

if TYPE_CHECKING:
    from npuprof.pipeline.stages.base import RootContext

FINDING = "unfused_loss_chain"
LOSS_INPUT_COLUMNS = ["name", "type", "start_ns", "end_ns", "primary_category", *TRAFFIC_COLUMNS]
# one row per chain kernel: its chain (an id unique on its rank), where it runs and what it costs
MEMBER_COLUMNS = ["rank_id", "chain", "type", "start_us", "kernel_us", "bytes", "marks"]
# one row per chain: the shape of unfused_ops' chains (span_us: first kernel's start to last one's end),
# with the kernels' own time, the fused kernel's and what fusing saves (kernel time − fused, never more)
CHAIN_COLUMNS = [
    "rank_id",
    "chain",
    "pattern",
    "kernels",
    "first_name",
    "logits",
    "dtype",
    "start_us",
    "span_us",
    "kernel_us",
    "fused_us",
    "saved_us",
    "priced_by",
]
MEASURED, TRAFFIC = "measured", "traffic"


def squeezed_leading_shapes(input_shapes: pd.Series) -> tuple[np.ndarray, np.ndarray, list[tuple[int, ...]]]:
    """Per kernel, (code of its first input's shape without unit dims, that shape's element count) and the
    shape per code: equal codes are the same tensor seen 2-D or 3-D ([4096, 1, V] and [4096, V])."""
    codes, texts = text_codes(input_shapes)
    squeezed = []
    for text in texts:  # a loop over distinct shape texts
        shapes = parse_shapes(text)
        first = shapes[0] if shapes and shapes[0] is not None else ()
        squeezed.append(tuple(d for d in first if d != 1))
    shape_codes, distinct = pd.factorize(pd.Series(squeezed, dtype=object))
    elements = np.array([numel(shape) for shape in distinct], dtype=np.int64)
    return shape_codes[codes], elements[shape_codes[codes]], list(distinct)


def loss_members(
    events: pd.DataFrame, types: np.ndarray, shape: np.ndarray, elements: np.ndarray, spec: dict
) -> pd.DataFrame:
    """The kernels of every loss chain among a rank's kernels (``events`` in device order; ``types``: their
    op_types; ``shape`` and ``elements``: their squeezed_leading_shapes): MEMBER_COLUMNS without rank_id,
    with each one's name, end, first input's bytes, whether it is a mark or a seed, its input dtype and its
    shape code."""
    stop = events["primary_category"].fillna("").str.startswith(tuple(spec["stop_categories"])).to_numpy()
    segment = np.cumsum(stop)  # the kernels between two matmuls share a segment
    key = segment * (int(shape.max(initial=0)) + 1) + shape
    seeds = np.isin(types, spec["seeds"]) & (elements >= int(spec["min_elements"])) & ~stop
    marked = np.isin(types, spec["marks"])
    candidate = np.isin(key, key[seeds]) & ~stop
    # a chain gathers from or scatters into its tensor: a softmax alone (attention scores) is not a loss
    chain_keys = np.intersect1d(key[seeds], key[candidate & marked])
    member = np.isin(key, chain_keys) & ~stop
    if not member.any():
        return pd.DataFrame(columns=[*MEMBER_COLUMNS[1:], "shape"])
    rows = np.flatnonzero(member)
    traffic = kernel_traffic(events.iloc[rows])
    start, end = events["start_ns"].to_numpy()[rows], events["end_ns"].to_numpy()[rows]
    members = pd.DataFrame(
        {
            "chain": pd.factorize(key[rows])[0],
            "type": types[rows],
            "name": events["name"].to_numpy(object)[rows],
            "start_us": start / 1000.0,
            "end_us": end / 1000.0,
            "kernel_us": (end - start) / 1000.0,
            "bytes": (traffic["input_bytes"] + traffic["output_bytes"]).to_numpy(),
            "first_input_bytes": (traffic["input_bytes"] - traffic["later_input_bytes"]).to_numpy(),
            "marks": marked[rows],
            "seed": seeds[rows],
            "dtype": map_distinct(events["input_dtypes"].iloc[rows], lambda text: (parse_dtypes(text) or [""])[0]),
            "shape": shape[rows],
        }
    )
    sizes = members.groupby("chain")["chain"].transform("size")
    return members[sizes >= int(spec["min_kernels"])].reset_index(drop=True)


def priced_chains(
    members: pd.DataFrame, fused: pd.DataFrame, shapes: list[tuple[int, ...]], spec: dict
) -> pd.DataFrame:
    """Per chain of ``members`` (loss_members' rows), CHAIN_COLUMNS without rank_id: its fused kernels'
    time measured where the rank runs every one of ``spec["fused"]`` on the chain's shape (``fused``: those
    kernels, type, shape and kernel_us), else the bytes a fused loss moves — ``passes`` reads and writes of
    the logits as the chain receives them — at the bandwidth of the chain's own elementwise and reduction
    kernels (a gather or scatter touches a few elements of its operand, not its bytes)."""
    measured = fused.groupby(["shape", "type"])["kernel_us"].median().unstack("type")
    rows = []
    for chain, own in members.groupby("chain", sort=True):  # a loop over chains (a few per step)
        shape = int(own["shape"].iloc[0])
        kernel_us = float(own["kernel_us"].sum())
        streaming = own[~own["marks"].to_numpy(bool)]
        present = measured.loc[shape].dropna() if shape in measured.index else pd.Series(dtype=float)
        if set(spec["fused"]) <= set(present.index):
            fused_us, how = float(present[list(spec["fused"])].sum()), MEASURED
        else:
            rate = streaming["bytes"].sum() / streaming["kernel_us"].sum()  # bytes per µs
            fused_us, how = float(spec["passes"]) * float(own["first_input_bytes"].iloc[0]) / rate, TRAFFIC
        seed = own[own["seed"].to_numpy(bool)].iloc[0]
        rows.append(
            {
                "chain": int(chain),
                "pattern": "cross_entropy",
                "kernels": " → ".join(map(str, own["type"])),
                "first_name": seed["name"],
                "logits": " × ".join(map(str, shapes[shape])),
                "dtype": seed["dtype"],
                "start_us": float(own["start_us"].iloc[0]),
                "span_us": float(own["end_us"].iloc[-1] - own["start_us"].iloc[0]),
                "kernel_us": kernel_us,
                "fused_us": fused_us,
                "saved_us": max(kernel_us - fused_us, 0.0) if np.isfinite(fused_us) else np.nan,
                "priced_by": how,
            }
        )
    return pd.DataFrame(rows, columns=CHAIN_COLUMNS[1:]).dropna(subset=["saved_us"])


def rank_loss_chains(rank: int, events: pd.DataFrame, spec: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(chains, members) of one rank's kernels in device order: CHAIN_COLUMNS and MEMBER_COLUMNS plus the
    saving each member carries (its share of its chain's, by its time)."""
    types = op_types(events)
    shape, elements, shapes = squeezed_leading_shapes(events["input_shapes"])
    members = loss_members(events, types, shape, elements, spec)
    if members.empty:
        return pd.DataFrame(columns=CHAIN_COLUMNS), pd.DataFrame(columns=[*MEMBER_COLUMNS, "saved_us"])
    is_fused = np.isin(types, spec["fused"])
    fused = pd.DataFrame(
        {
            "shape": shape[is_fused],
            "type": types[is_fused],
            "kernel_us": (events["end_ns"] - events["start_ns"]).to_numpy()[is_fused] / 1000.0,
        }
    )
    chains = priced_chains(members, fused, shapes, spec).assign(rank_id=rank)[CHAIN_COLUMNS]
    share = members["kernel_us"] / members.groupby("chain")["kernel_us"].transform("sum")
    saved = members["chain"].map(chains.set_index("chain")["saved_us"]) * share
    members = members.assign(rank_id=rank, saved_us=saved).dropna(subset=["saved_us"])
    return chains, members[[*MEMBER_COLUMNS, "saved_us"]]


class LossChains(NamedTuple):
    """Every rank's loss chains (CHAIN_COLUMNS) and their kernels (MEMBER_COLUMNS + saved_us)."""

    chains: pd.DataFrame
    members: pd.DataFrame


@derived_input("loss_chains")
def loss_chains(ctx: RootContext) -> LossChains:
    """The loss chains of every rank inside its steps, priced."""
    spec = rule(FINDING)

    def scan(rank: int, kernels: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        return rank_loss_chains(rank, in_start_order(kernels), spec)

    found = [parts for _, parts in scan_kernels_in_steps(ctx, LOSS_INPUT_COLUMNS, scan)]
    chains = [c for c, _ in found if len(c)]
    members = [m for _, m in found if len(m)]
    return LossChains(
        pd.concat(chains, ignore_index=True) if chains else pd.DataFrame(columns=CHAIN_COLUMNS),
        pd.concat(members, ignore_index=True) if members else pd.DataFrame(columns=[*MEMBER_COLUMNS, "saved_us"]),
    )


@detector(
    finding_types=(FINDING,),
    reads={
        "loss_chains": (),
        "steps": ("rank_id", "step_ordinal", "complete", "wall_ms"),
        "operators": ("rank_id", "name", "evidence_id"),
        "step_model": (),
    },
)
def unfused_loss_chain(inputs: DiagnosisContext) -> list[Finding]:
    """One finding for the loss chains when fusing them saves the rule's share of the step."""
    spec, found, steps = rule(FINDING), inputs.loss_chains, inputs.steps
    if found.chains.empty or steps.empty:
        return []
    threshold_ms = spec["min_step_share"] * mean_step_wall_ms(steps)
    step_count = steps_per_rank(steps)
    findings = []
    for _, own, per_step in costly_chains(found.chains, "pattern", steps, spec["min_step_share"]):
        windows = found.members[found.members["rank_id"].isin(per_step.index)]
        claim, worded = chain_claim(
            inputs, own, per_step, step_count, windows.rename(columns={"saved_us": "duration_us"})
        )
        kernel_ms = own.groupby("rank_id")["kernel_us"].sum().div(step_count).dropna().mean() / 1000.0
        measured = own["priced_by"].mode().iloc[0] == MEASURED
        kernels = own["kernels"].mode().iloc[0]
        findings.append(
            Finding(
                finding_type=FINDING,
                scope="operator",
                statistic={"name": "unfused_loss_ms_per_step", "value": worded["saved_ms"], "threshold": threshold_ms},
                values={
                    "kernels": kernels,
                    "length": kernels.count("→") + 1,
                    "logits": own["logits"].mode().iloc[0],
                    "dtype": compute_dtype([own["dtype"].mode().iloc[0]]) or own["dtype"].mode().iloc[0].lower(),
                    "kernel_ms": float(kernel_ms),
                    "passes": int(spec["passes"]),
                    "fused": "/".join(spec["fused"]),
                    **worded,
                    "priced_by": "the fused kernels measured on the same logits"
                    if measured
                    else "from the bytes it would move, at the chain's own bandwidth",
                },
                limitations=[] if measured else ["the fused loss's time is estimated from its traffic, not measured"],
                **claim,  # each chain kernel shortened by its share of the saving, the steps replayed
            )
        )
    return findings
