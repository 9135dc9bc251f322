"""syncbn: BatchNorm layers converted to SyncBatchNorm sync their statistics over data parallel in every
forward (a blocking all-gather) and backward (an all-reduce of the gradient sums): small collectives in
line with the compute, each paying the collective's start and the wait for the slowest peer.

The calls are the host's SyncBatchNorm spans (evidence's launch_scopes: the framework op each kernel was
launched inside); the collectives launched inside them are its cost. Priced by the replay with those
collectives gone — plain BatchNorm runs the same statistics kernels without them.
"""

from __future__ import annotations

import pandas as pd

from npuprof.pipeline import io, schema
from npuprof.pipeline.io import int_ranks
from npuprof.pipeline.stages.base import RootContext
from npuprof.pipeline.stages.diagnostics.collective_sizes import INSTANCE_COLUMNS
from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, evidence_cap, priced, rule
from npuprof.pipeline.stages.diagnostics.registry import derived_input, detector
from npuprof.pipeline.stages.diagnostics.retiming import scaled_transit
from npuprof.pipeline.stages.diagnostics.step_scale import mean_step_wall_ms

FINDING = "syncbn"
SCOPE_COLUMNS = ["step_ordinal", "scope", "span_start_ns", "start_ns"]


@derived_input("framework_launches")
def framework_launches(ctx: RootContext) -> pd.DataFrame | None:
    """The kernels the host launched inside the configured framework ops (evidence's launch_scopes), with
    their rank; None where no rank's host trace was read (an empty table then says nothing)."""
    evidence = io.read_json_or_empty(ctx.out_dir / schema.stage_manifest_name("evidence"))
    if (
        not evidence.get("host_trace", {}).get("ranks_attributed")
        or not (ctx.out_dir / schema.LAUNCH_SCOPES.path).exists()
    ):
        return None
    return int_ranks(ctx.read_table(schema.LAUNCH_SCOPES, columns=SCOPE_COLUMNS).to_pandas())


def scoped_instances(launches: pd.DataFrame, alignment: pd.DataFrame, scope: str) -> pd.DataFrame:
    """The collective instances (alignment rows) the host launched inside ``scope``'s spans: each launched
    kernel matched to its rank's instance starting at the same time (within a µs)."""
    mine = launches[launches["scope"] == scope].assign(start_us=lambda f: f["start_ns"] / 1000.0)
    instances = alignment[list(INSTANCE_COLUMNS)].sort_values("start_us")
    matched = pd.merge_asof(
        mine.sort_values("start_us"), instances, on="start_us", by="rank_id", direction="nearest", tolerance=1.0
    )
    return matched.dropna(subset=["alignment_id"])


def calls_per_step(calls: pd.DataFrame) -> float:
    """The SyncBatchNorm calls (one row each) per rank and step that has any."""
    return len(calls) / max(calls.groupby(["rank_id", "step_ordinal"]).ngroups, 1)


@detector(
    finding_types=(FINDING,),
    reads={
        "framework_launches": (),
        "alignment": INSTANCE_COLUMNS,
        "steps": ("rank_id", "step_ordinal", "complete", "wall_ms"),
        "step_model": (),
    },
)
def syncbn(inputs: DiagnosisContext) -> list[Finding]:
    """One finding when the collectives the SyncBatchNorm calls launch cost the step ``share_min`` of it."""
    spec = rule(FINDING)
    launches = inputs.framework_launches
    if launches is None:
        inputs.not_judging(FINDING, spec["not_judged"])
        return []
    calls = launches[launches["scope"] == spec["scope"]].drop_duplicates(["rank_id", "span_start_ns"])
    alignment = inputs.alignment
    if not len(calls) or not len(alignment):
        return []
    synced = scoped_instances(launches, alignment[alignment["member_count"] >= 2], spec["scope"])
    if not len(synced):
        # calls but no collective inside them: a group of one rank syncs nothing, or the capture does not
        # link its collectives to their launches (a db export): either way nothing is measured to price
        inputs.not_judging(FINDING, spec["no_collectives"].format(calls_per_step=calls_per_step(calls)))
        return []
    factors = pd.Series(0.0, index=synced["alignment_id"].unique())
    claim = priced(inputs.step_model, scaled_transit(inputs.step_model, factors))
    wall_ms = mean_step_wall_ms(inputs.steps) if len(inputs.steps) else 0.0
    if not wall_ms or claim["recoverable_ms_per_step"] < spec["share_min"] * wall_ms:
        return []
    return [_finding(calls, synced, claim, spec, wall_ms)]


def _finding(calls: pd.DataFrame, synced: pd.DataFrame, claim: dict, spec: dict, wall_ms: float) -> Finding:
    ranks = sorted(int(r) for r in calls["rank_id"].unique())
    rank_steps = synced.groupby(["rank_id", "step_ordinal"]).ngroups
    kinds = (synced.groupby("kind").size() / rank_steps).sort_values(ascending=False)
    role = str(synced["parallel_role"].fillna("unknown").mode().iloc[0])
    evidence = synced.sort_values("transit_us", ascending=False)["evidence_id"].drop_duplicates()
    return Finding(
        finding_type=FINDING,
        scope="rank",
        rank_ids=ranks,
        evidence_ids=evidence.head(evidence_cap()).tolist(),
        statistic={
            "name": "SyncBatchNorm collectives' share of the step",
            "value": claim["recoverable_ms_per_step"] / wall_ms,
            "threshold": spec["share_min"],
        },
        values={
            "ranks": ", ".join(map(str, ranks)),
            "role": role,
            "calls_per_step": calls_per_step(calls),
            "collectives_per_step": len(synced) / rank_steps,
            "kinds": ", ".join(f"{n:.0f} {k}" for k, n in kinds.items()),
            "ms_per_step": claim["recoverable_ms_per_step"],
        },
        limitations=[
            "priced as the collectives gone (plain BatchNorm, each rank's own batch statistics); the efficient "
            "SyncBatchNorm (one all-gather of sum, square sum and count per call) keeps part of them",
        ],
        **claim,
    )
