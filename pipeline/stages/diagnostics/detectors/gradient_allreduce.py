"""gradient_allreduce_exposed: the data-parallel gradient sync — an all-reduce, or a distributed
optimizer's reduce-scatter (``kinds``) — runs exposed, after the backward, where it could run under it.

A ledger-phase detector: it reads the step ledger as the first findings explain it and takes the
"communication <role> <kind> transfer" lines of the gradient-sync roles (``roles``) that no finding
claims. Overlapping the sync with the backward (DDP's gradient buckets, Megatron's overlap_grad_reduce)
hides every bucket but the last, whose gradients are ready only when the backward ends; so what it
recovers is the exposed transfer minus the step's last all-reduce (or, where the step runs a single
one, minus its share of ``assumed_buckets``). Clean overlapped training exposes only that last bucket
and stays silent; so does a sync that already overlaps (more than ``overlapped_share_max`` of its
time under compute) but is longer than the backward left to hide it.
"""

from __future__ import annotations

import pandas as pd

from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.detectors.collective_wait import events_of
from npuprof.pipeline.stages.diagnostics.findings import Finding, evidence_cap, rule
from npuprof.pipeline.stages.diagnostics.ledger import EXPECTED, UNEXPLAINED, line_parts
from npuprof.pipeline.stages.diagnostics.registry import detector
from npuprof.pipeline.summaries.accounting import LINK_TIME_COLUMNS, op_transfer_ms

LEDGER_READS = ("rank_id", "step_ordinal", "step_id", "complete", "wall_ms", "line", "ms", "explained_by")
LINKS = tuple(LINK_TIME_COLUMNS)
SYNC_WORDS = {"allreduce": "all-reduce", "reducescatter": "reduce-scatter"}  # how the text names each kind


def exposed_transfer(ledger: pd.DataFrame, roles: list[str], kinds: list[str]) -> pd.DataFrame:
    """Per rank, complete step, role and sync kind: the exposed gradient-sync transfer no finding claims
    (rank_id, step_id, role, kind, ms, wall_ms)."""
    complete = ledger[ledger["complete"].astype(bool)]
    explained_by = complete["explained_by"].astype(str)
    free = complete[(explained_by == UNEXPLAINED) | explained_by.str.startswith(EXPECTED)]
    free = free[free["line"].str.startswith("communication ")]
    free = pd.concat([free, line_parts(free["line"])], axis=1)
    free = free[free["kind"].isin(kinds) & (free["part"] == "transfer") & free["role"].isin(roles)]
    grouped = free.groupby(["rank_id", "step_id", "role", "kind"], as_index=False)
    return grouped.agg(ms=("ms", "sum"), wall_ms=("wall_ms", "first"))


def hidden_share(accounting: pd.DataFrame, roles: list[str], kinds: list[str]) -> pd.DataFrame:
    """Per rank, role and sync kind: the share of its time compute hid (rank_id, role, kind, hidden_share)."""
    rows = accounting[
        accounting["breakdown"].isin(["comm_hidden_by_role_kind", "comm_by_role_kind"])
        & accounting["complete"].astype(bool)
    ]
    tokens = rows["component"].astype(str).str.rsplit(" ", n=1)
    rows = rows.assign(role=tokens.str[0], kind=tokens.str[-1])
    rows = rows[rows["kind"].isin(kinds) & rows["role"].isin(roles)]
    ms = rows.pivot_table(
        index=["rank_id", "role", "kind"], columns="breakdown", values="ms", aggfunc="sum", fill_value=0.0
    )
    hidden = ms.get("comm_hidden_by_role_kind", pd.Series(0.0, index=ms.index))
    exposed = ms.get("comm_by_role_kind", pd.Series(0.0, index=ms.index))
    total = (hidden + exposed).where(hidden + exposed > 0, 1.0)
    return (hidden / total).rename("hidden_share").reset_index()


def last_sync(ops: pd.DataFrame, events: pd.DataFrame, roles: list[str], kinds: list[str]) -> pd.DataFrame:
    """Per rank, step, role and sync kind: how many such ops the step runs and the transit of its last one
    (rank_id, step_id, role, kind, ops, last_transit_ms)."""
    named = events[["rank_id", "name", "kind"]].drop_duplicates(["rank_id", "name"])
    ops = ops.merge(named, left_on=["rank_id", "op_name"], right_on=["rank_id", "name"], how="inner")
    ops = ops[ops["kind"].isin(kinds) & ops["parallel_role"].isin(roles)].sort_values("start_us")
    ops = ops.assign(transfer_ms=op_transfer_ms(ops))
    grouped = ops.groupby(["rank_id", "step_id", "parallel_role", "kind"])
    last = grouped.agg(ops=("op_name", "size"), last_transit_ms=("transfer_ms", "last")).reset_index()
    return last.rename(columns={"parallel_role": "role"})


def recoverable_by_overlap(exposed: pd.DataFrame, last: pd.DataFrame, assumed_buckets: int) -> pd.DataFrame:
    """``exposed`` with the ms per step overlap would hide (``hideable_ms``): the exposed transfer minus
    the last all-reduce's transit, or minus 1 / ``assumed_buckets`` of it where the step runs one."""
    rows = exposed.merge(last, on=["rank_id", "step_id", "role", "kind"], how="left")
    single = rows["ops"].fillna(1) <= 1
    kept = rows["last_transit_ms"].fillna(0.0).clip(upper=rows["ms"])
    hideable = rows["ms"] - kept.where(~single, rows["ms"] / assumed_buckets)
    return rows.assign(hideable_ms=hideable.clip(lower=0.0))


@detector(
    finding_types=("gradient_allreduce_exposed",),
    reads={
        "ledger": LEDGER_READS,
        "accounting": ("rank_id", "complete", "breakdown", "component", "ms"),
        "comm_events": ("rank_id", "name", "kind", "parallel_role", "duration_us", "evidence_id"),
        "comm_ops": ("rank_id", "step_id", "op_name", "parallel_role", "start_us", "transit_ms", "idle_ms", *LINKS),
    },
    phase="ledger",
)
def gradient_allreduce(inputs: DiagnosisContext) -> list[Finding]:
    """One finding per gradient-sync role whose exposed all-reduce transfer, beyond its last bucket, is
    worth recovering on some rank."""
    spec = rule("gradient_allreduce_exposed")
    roles = list(spec["roles"])
    kinds = list(spec["kinds"])
    exposed = exposed_transfer(inputs.ledger, roles, kinds)
    if not len(exposed) or not len(inputs.comm_ops):
        return []
    last = last_sync(inputs.comm_ops, inputs.comm_events, roles, kinds)
    rows = recoverable_by_overlap(exposed, last, spec["assumed_buckets"])
    keys = ["role", "kind", "rank_id"]
    per_rank = rows.groupby(keys, as_index=False)[["ms", "hideable_ms", "wall_ms", "ops"]].mean()
    per_rank["share"] = per_rank["hideable_ms"] / per_rank["wall_ms"].where(per_rank["wall_ms"] > 0, 1)
    per_rank = per_rank.merge(hidden_share(inputs.accounting, roles, kinds), on=keys, how="left")
    per_rank = per_rank[per_rank["hidden_share"].fillna(0.0) <= spec["overlapped_share_max"]]
    findings = []
    for (role, kind), chosen in per_rank[per_rank["share"] >= spec["share_min"]].groupby(["role", "kind"]):
        ranks = sorted(int(r) for r in chosen["rank_id"])
        longest = events_of(inputs.comm_events, ranks, role, kind)["evidence_id"].head(evidence_cap())
        hideable, share = float(chosen["hideable_ms"].mean()), float(chosen["share"].mean())
        findings.append(
            Finding(
                finding_type="gradient_allreduce_exposed",
                scope="rank",
                rank_ids=ranks,
                evidence_ids=list(longest),
                statistic={
                    "name": f"hideable exposed {kind} share of step",
                    "value": share,
                    "threshold": spec["share_min"],
                },
                values={
                    "ranks": ", ".join(map(str, ranks)),
                    "role": role,
                    "kind": kind,
                    "sync": SYNC_WORDS.get(kind, kind),
                    "exposed_ms": float(chosen["ms"].mean()),
                    "hideable_ms": hideable,
                    "ops": float(chosen["ops"].mean()),
                    "share": share,
                },
                limitations=[
                    f"priced as the exposed transfer beyond the step's last {kind}, which no backward "
                    "compute is left to hide; the backward must be long enough to hide the rest"
                ],
                recoverable_ms_per_step=hideable,
            )
        )
    return findings
