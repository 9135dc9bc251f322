"""bandwidth_contention: collectives transfer slower while their rank computes beside them than the same
collectives do alone — the compute takes its share of the memory (HBM) bandwidth their transfer goes
through — and the step waits for the difference.

Comparable instances are the same role and kind moving as much (their busiest transport's size within a
factor of two). The share ``s`` of an instance's life with its rank's compute beside it (cross_rank's
``compute_beside_us``) ran ``slowdown`` × as long as alone; an instance with compute beside it for at
least ``beside_share_min`` of its life measures it as ``s · transit ÷ (alone − (1 − s) · transit)``
(``alone``: the median transit of the instances alone; its own alone part moved its share at full
speed), and the family's slowdown is the median of those.

Priced by the replay with every instance's beside share at full speed, at most the exposed time of the
role and kind beyond its last instance (issued as the compute ends, it runs after it whatever the speed
before): the replay cannot see when an op queued behind a slowed one was issued, and starts it as soon
as the stream frees. Contention the step hides (the transfer still ends under the compute) costs nothing
and is not reported.
"""

from __future__ import annotations

import pandas as pd

from npuprof.pipeline.stages.diagnostics.collective_sizes import (
    FAMILY,
    INSTANCE_COLUMNS,
    SIZE_COLUMNS,
    size_classes,
    size_words,
    sized_ops,
)
from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, evidence_cap, priced, rule
from npuprof.pipeline.stages.diagnostics.registry import detector
from npuprof.pipeline.stages.diagnostics.retiming import scaled_transit
from npuprof.pipeline.stages.diagnostics.step_scale import mean_step_wall_ms

FINDING = "bandwidth_contention"
COMPARABLE = [*FAMILY, "size_class"]


def beside_shares(ops: pd.DataFrame) -> pd.DataFrame:
    """``ops`` (sized_ops rows) with ``beside`` (the share of each instance's life its rank computed
    beside it) and ``size_class`` (log2 of the MB it moved; NaN where unknown)."""
    life = ops["duration_us"].where(ops["duration_us"] > 0)
    return ops.assign(
        beside=(ops["compute_beside_us"] / life).clip(0.0, 1.0).fillna(0.0),
        size_class=size_classes(ops["size_mb"]),
    ).dropna(subset=["size_class", "transit_us"])


def slowdowns(ops: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """Per comparable family with enough instances alone and beside compute: the alone median transit
    (``alone_us``), the slowdown beside compute (``slowdown``) and the instances measuring it."""
    alone = ops[ops["beside"] <= spec["alone_share_max"]].groupby(COMPARABLE)["transit_us"]
    table = pd.DataFrame({"alone_us": alone.median(), "alone_count": alone.size()})
    table = table[table["alone_count"] >= spec["min_instances"]]
    beside = ops[ops["beside"] >= spec["beside_share_min"]].merge(table.reset_index(), on=COMPARABLE, how="inner")
    # the alone part of its life, (1 − s) · transit, moved that much of its bytes at full speed; the rest,
    # alone_us − (1 − s) · transit of work, took s · transit
    rest = beside["alone_us"] - (1.0 - beside["beside"]) * beside["transit_us"]
    beside = beside.assign(measured=beside["beside"] * beside["transit_us"] / rest.where(rest > 0))
    grouped = beside.groupby(COMPARABLE)["measured"]
    table = table.join(pd.DataFrame({"slowdown": grouped.median(), "beside_count": grouped.size()}), how="inner")
    return table[table["beside_count"] >= spec["min_instances"]].reset_index()


@detector(
    finding_types=(FINDING,),
    reads={
        "alignment": (*INSTANCE_COLUMNS, "duration_us", "compute_beside_us"),
        "comm_ops": SIZE_COLUMNS,
        "accounting": ("rank_id", "step_id", "complete", "breakdown", "component", "ms"),
        "steps": ("rank_id", "step_ordinal", "complete", "wall_ms"),
        "step_model": (),
    },
)
def bandwidth_contention(inputs: DiagnosisContext) -> list[Finding]:
    """One finding per role and kind whose transfers beside compute are at most ``rate_ratio_max`` of
    their speed alone and cost the step at least ``share_min`` of it."""
    spec = rule(FINDING)
    alignment, comm_ops = inputs.alignment, inputs.comm_ops
    if not len(alignment) or not len(comm_ops) or "compute_beside_us" not in alignment:
        return []
    ops = beside_shares(sized_ops(alignment, comm_ops))
    families = slowdowns(ops, spec)
    families = families[1.0 / families["slowdown"] <= spec["rate_ratio_max"]]
    wall_ms = mean_step_wall_ms(inputs.steps) if len(inputs.steps) else 0.0
    findings = []
    for (role, kind), chosen in families.groupby(FAMILY):  # a loop over roles and kinds that contend
        members = ops.merge(chosen, on=COMPARABLE, how="inner")
        members["full_speed"] = 1.0 - members["beside"] + members["beside"] / members["slowdown"]
        factors = members.groupby("alignment_id")["full_speed"].mean()
        claim = priced(inputs.step_model, scaled_transit(inputs.step_model, factors))
        bound = exposed_beyond_last(inputs.accounting, members, role, kind)
        capped = bound < claim["recoverable_ms_per_step"]  # the replay freed ops whose issue it cannot see
        if capped:
            claim = {"recoverable_ms_per_step": bound, "what_if": None}
        if wall_ms and claim["recoverable_ms_per_step"] >= spec["share_min"] * wall_ms:
            findings.append(_finding(members, chosen, role, kind, claim, spec, capped))
    return findings


def exposed_beyond_last(accounting: pd.DataFrame, members: pd.DataFrame, role: str, kind: str) -> float:
    """The most full speed can save, ms per step: per last instance of ``role`` ``kind`` in a step, the
    exposed time (summarize's comm_by_role_kind) its members wait for it beyond that instance at full
    speed — issued as the compute ends (a gradient bucket's last layers), it runs after the last member's
    compute whatever the speed before, so the least exposed member bounds them all."""
    rows = accounting[(accounting["breakdown"] == "comm_by_role_kind") & accounting["complete"].astype(bool)]
    rows = rows[rows["component"].astype(str) == f"{role} {kind}"]
    exposed = rows.groupby(["rank_id", "step_id"])["ms"].sum().rename("exposed_ms")
    last = members.sort_values("start_us").groupby(["rank_id", "step_id"]).last()
    last = last.assign(full_ms=last["transit_us"] * last["full_speed"] / 1e3).join(exposed, how="inner")
    per_instance = last.groupby("alignment_id").agg(exposed_ms=("exposed_ms", "min"), full_ms=("full_ms", "max"))
    beyond = (per_instance["exposed_ms"] - per_instance["full_ms"]).clip(lower=0.0)
    return float(beyond.mean()) if len(beyond) else 0.0


def _finding(
    members: pd.DataFrame, chosen: pd.DataFrame, role: str, kind: str, claim: dict, spec: dict, capped: bool
) -> Finding:
    ranks = sorted(int(r) for r in members["rank_id"].unique())
    beside = members[members["beside"] >= spec["beside_share_min"]]
    slowdown = float((chosen["slowdown"] * chosen["beside_count"]).sum() / chosen["beside_count"].sum())
    alone = members[members["beside"] <= spec["alone_share_max"]]
    rate_gbps = members["size_mb"] / (members["transit_us"] / 1e3)  # MB per ms
    return Finding(
        finding_type=FINDING,
        scope="rank",
        rank_ids=ranks,
        evidence_ids=beside.sort_values("transit_us", ascending=False)["evidence_id"].head(evidence_cap()).tolist(),
        statistic={
            "name": "transfer rate beside compute over alone",
            "value": 1.0 / slowdown,
            "threshold": spec["rate_ratio_max"],
        },
        values={
            "ranks": ", ".join(map(str, ranks)),
            "role": role,
            "kind": kind,
            "rate": 1.0 / slowdown,
            "size": size_words(float(beside["size_mb"].median())),
            "beside_per_step": len(beside) / max(beside.groupby(["rank_id", "step_id"]).ngroups, 1),
            "alone_gbps": float(rate_gbps[alone.index].median()),
            "beside_gbps": float(rate_gbps[beside.index].median()),
            "ms_per_step": claim["recoverable_ms_per_step"],
        },
        limitations=[
            "priced on the communication side: the compute beside the transfer shares the same memory and may "
            "run slower too, which is not counted",
            "the slowdown is measured against the same collectives run alone in this capture",
            *(
                [
                    "an upper bound: ops queued behind the slowed ones may have been issued later than the stream "
                    "freed (a bucket waits for its layers' backward); priced as the exposed time beyond the last op"
                ]
                if capped
                else []
            ),
        ],
        confidence="low" if capped else None,
        **claim,
    )
