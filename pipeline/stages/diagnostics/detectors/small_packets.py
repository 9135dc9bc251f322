"""small_packet_collective: runs of small collectives back to back on one communicator, each paying the
collective's fixed start (its latency) to move a few bytes; bucketed, all but one start of each bucket go.

An op costs about ``latency + size / bandwidth``. The latency of a communicator's ops of one kind is
measured: what a small op's transit leaves after its bytes at the bandwidth the same role and kind reach
on their large ops — or, where they run no large op, the smallest op's transit (an upper bound, and the
finding says so). A run is consecutive collectives of one role and kind on a rank, each small (its
busiest transport moved less than ``small_mb``, ``small_mb_rdma`` over RDMA) with less local work between
two of them than ``gap_over_latency_max`` of the latency: the work between them is shorter than what each
start adds, so computing every input first and reducing them together — what a bucketed implementation
does — keeps that work and drops the starts. Priced by the replay with each run's ops, all but the
buckets its bytes need (``bucket_mb`` each), a latency shorter.

Tensor-parallel all-reduces of decode with a layer's compute between them are not a run: they depend on
the work between them, and bucketing them is not possible.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof.pipeline.stages.diagnostics.collective_sizes import (
    FAMILY,
    INSTANCE_COLUMNS,
    SIZE_COLUMNS,
    size_words,
    sized_ops,
)
from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, evidence_cap, priced, rule
from npuprof.pipeline.stages.diagnostics.registry import detector
from npuprof.pipeline.stages.diagnostics.retiming import StepModel, WhatIf
from npuprof.pipeline.stages.diagnostics.step_scale import mean_step_wall_ms

FINDING = "small_packet_collective"


def latencies(ops: pd.DataFrame, small: np.ndarray) -> pd.DataFrame:
    """Per role and kind: the latency one op adds (``latency_us``), the bandwidth of its large ops
    (``large_gbps``, NaN where it runs none) and whether the latency is measured against them."""
    sized = ops.assign(small=small, gbps=ops["size_mb"] / (ops["transit_us"] / 1e3))
    large = sized[~sized["small"] & (sized["transit_us"] > 0)].groupby(FAMILY)["gbps"].median().rename("large_gbps")
    few = sized[sized["small"]].join(large, on=FAMILY)
    few = few.assign(left_us=few["transit_us"] - few["size_mb"] / few["large_gbps"] * 1e3)
    grouped = few.groupby(FAMILY)
    table = pd.DataFrame(
        {"measured": grouped["left_us"].median().clip(lower=0.0), "floor": grouped["transit_us"].min()}
    ).join(large)
    table["latency_us"] = table["measured"].where(table["large_gbps"].notna(), table["floor"])
    table["against_large"] = table["large_gbps"].notna()
    return table[["latency_us", "large_gbps", "against_large"]].reset_index()


def small_runs(ops: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """The small ops that run back to back (``run``: a run's id; ``latency_us`` of their family), in runs
    of at least ``min_ops``."""
    limit = np.where(ops["transport"] == "RDMA", spec["small_mb_rdma"], spec["small_mb"])
    small = (ops["size_mb"] < limit).to_numpy()
    ops = ops.merge(latencies(ops, small), on=FAMILY, how="left").assign(small=small)
    same_slot = (ops["rank_id"] == ops["rank_id"].shift()) & (ops["step_id"] == ops["step_id"].shift())
    same_family = (
        same_slot & (ops["parallel_role"] == ops["parallel_role"].shift()) & (ops["kind"] == ops["kind"].shift())
    )
    gap = ops["start_us"] - ops["end_us"].shift()
    joined = same_family & ops["small"] & ops["small"].shift(fill_value=False)
    joined &= gap <= spec["gap_over_latency_max"] * ops["latency_us"]
    ops["run"] = np.cumsum(~joined.to_numpy())
    ops = ops[ops["small"]]
    length = ops.groupby("run")["run"].transform("size")
    return ops[length >= spec["min_ops"]]


def bucketed(model: StepModel, runs: pd.DataFrame, bucket_mb: float) -> tuple[WhatIf, pd.DataFrame]:
    """The change: per run, all ops but the buckets its bytes need (one per ``bucket_mb``) a latency
    shorter (an instance shortened on any rank's run is shortened once); and per run its ops, bytes and
    buckets."""
    per_run = runs.groupby("run").agg(
        rank_id=("rank_id", "first"), ops=("alignment_id", "size"), size_mb=("size_mb", "sum")
    )
    per_run["buckets"] = np.maximum(np.ceil(per_run["size_mb"] / bucket_mb), 1.0)
    order = runs.groupby("run").cumcount()  # the run's first ops become the buckets; the rest lose a start
    cut = runs[order.to_numpy() >= runs["run"].map(per_run["buckets"]).to_numpy()]
    latency = cut.groupby("alignment_id")["latency_us"].max()
    change = WhatIf.none(model)
    shortened = pd.Series(model.instance_ids).map(latency).fillna(0.0).to_numpy(float)
    change.transit_us = np.clip(change.transit_us - shortened, 0.0, None)
    return change, per_run


@detector(
    finding_types=(FINDING,),
    reads={
        "alignment": INSTANCE_COLUMNS,
        "comm_ops": SIZE_COLUMNS,
        "steps": ("rank_id", "wall_ms"),
        "step_model": (),
    },
)
def small_packets(inputs: DiagnosisContext) -> list[Finding]:
    """One finding per role and kind whose runs of small back-to-back collectives cost, in starts that
    bucketing would drop, at least ``share_min`` of the mean step."""
    spec = rule(FINDING)
    alignment, comm_ops = inputs.alignment, inputs.comm_ops
    if not len(alignment) or not (alignment["member_count"] >= 2).any():
        return []
    if not len(comm_ops):
        inputs.not_judging(FINDING, "no rank has communication.json (or analysis.db): collective sizes unknown")
        return []
    runs = small_runs(sized_ops(alignment, comm_ops), spec)
    wall_ms = mean_step_wall_ms(inputs.steps)
    findings = []
    for (role, kind), family in runs.groupby(FAMILY):  # a loop over communicator roles and kinds
        change, per_run = bucketed(inputs.step_model, family, spec["bucket_mb"])
        claim = priced(inputs.step_model, change)
        if not wall_ms or claim["recoverable_ms_per_step"] < spec["share_min"] * wall_ms:
            continue
        findings.append(_finding(family, per_run, role, kind, claim, spec))
    return findings


def _finding(family: pd.DataFrame, per_run: pd.DataFrame, role: str, kind: str, claim: dict, spec: dict) -> Finding:
    ranks = sorted(int(r) for r in family["rank_id"].unique())
    slots = family.groupby(["rank_id", "step_id"]).ngroups
    longest = per_run["ops"].idxmax()
    first = family.iloc[0]
    measured = bool(first["against_large"])
    ops_per_step = len(family) / slots
    limitations = [
        f"each op's latency is the {role} {kind}'s small ops' transit less their bytes at the "
        f"{first['large_gbps']:.1f} GB/s its large ops reach"
        if measured
        else f"no large {role} {kind} op to measure the bandwidth against: the latency is the smallest op's "
        "whole transit, an upper bound",
        "the work between the ops is kept: bucketing moves it before the one op, it does not remove it",
    ]
    return Finding(
        finding_type=FINDING,
        scope="rank",
        rank_ids=ranks,
        evidence_ids=family[family["run"] == longest]["evidence_id"].head(evidence_cap()).tolist(),
        statistic={
            "name": "small ops per step in back-to-back runs",
            "value": ops_per_step,
            "threshold": spec["min_ops"],
        },
        values={
            "ranks": ", ".join(map(str, ranks)),
            "role": role,
            "kind": kind,
            "ops_per_step": ops_per_step,
            "runs_per_step": len(per_run) / slots,
            "median_size": size_words(float(family["size_mb"].median())),
            "latency_us": float(first["latency_us"]),
            "buckets_per_run": float(per_run["buckets"].mean()),
            "ms_per_step": claim["recoverable_ms_per_step"],
        },
        limitations=limitations,
        confidence=None if measured else "low",
        **claim,
    )
