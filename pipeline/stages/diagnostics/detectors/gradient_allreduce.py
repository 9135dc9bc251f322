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

import numpy as np
import pandas as pd

from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.detectors.collective_wait import events_of
from npuprof.pipeline.stages.diagnostics.findings import Finding, evidence_cap, priced, rule
from npuprof.pipeline.stages.diagnostics.ledger import EXPECTED, UNEXPLAINED
from npuprof.pipeline.stages.diagnostics.ledger_credit import line_parts
from npuprof.pipeline.stages.diagnostics.registry import detector
from npuprof.pipeline.stages.diagnostics.retiming import StepModel, WhatIf, scaled_transit
from npuprof.pipeline.stages.diagnostics.savings import UNKNOWN_ROLE
from npuprof.pipeline.summaries.op_parts import LINK_TIME_COLUMNS, op_transfer_ms

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
        "step_model": (),
    },
    phase="ledger",
)
def gradient_allreduce(inputs: DiagnosisContext) -> list[Finding]:
    """One finding per gradient-sync role whose exposed sync after the backward (beyond its last bucket) and,
    under a distributed optimizer, its exposed parameter all-gather are worth recovering on some rank;
    priced by replaying the step with them hidden."""
    spec = rule("gradient_allreduce_exposed")
    roles, kinds, gathers = list(spec["roles"]), list(spec["kinds"]), list(spec["gather_kinds"])
    exposed = exposed_transfer(inputs.ledger, roles, [*kinds, *gathers])
    if not len(exposed) or not len(inputs.comm_ops):
        return []
    last = last_sync(inputs.comm_ops, inputs.comm_events, roles, kinds)
    rows = recoverable_by_overlap(exposed[exposed["kind"].isin(kinds)], last, spec["assumed_buckets"])
    # a distributed optimizer (it reduce-scatters) all-gathers the updated parameters: all of it can run
    # under the next forward
    zero = rows.loc[rows["kind"] == "reducescatter", ["rank_id", "step_id", "role"]].drop_duplicates()
    gathered = exposed[exposed["kind"].isin(gathers)].merge(zero, on=["rank_id", "step_id", "role"])
    rows = pd.concat([rows, gathered.assign(hideable_ms=gathered["ms"], ops=np.nan)], ignore_index=True)
    keys = ["role", "kind", "rank_id"]
    per_kind = rows.groupby(keys, as_index=False)[["ms", "hideable_ms", "wall_ms", "ops"]].mean()
    per_kind = per_kind.merge(hidden_share(inputs.accounting, roles, [*kinds, *gathers]), on=keys, how="left")
    per_kind = per_kind[per_kind["hidden_share"].fillna(0.0) <= spec["overlapped_share_max"]]
    per_rank = per_kind.groupby(["role", "rank_id"], as_index=False)[["hideable_ms", "wall_ms"]].agg(
        {"hideable_ms": "sum", "wall_ms": "first"}
    )
    per_rank["share"] = per_rank["hideable_ms"] / per_rank["wall_ms"].where(per_rank["wall_ms"] > 0, 1)
    findings = []
    for role, chosen in per_rank[per_rank["share"] >= spec["share_min"]].groupby("role"):
        ranks = sorted(int(r) for r in chosen["rank_id"])
        mine = per_kind[(per_kind["role"] == role) & per_kind["rank_id"].isin(ranks)]
        findings.append(_finding(inputs, spec, role, ranks, mine, float(chosen["share"].mean())))
    return findings


def _finding(inputs: DiagnosisContext, spec: dict, role: str, ranks: list[int], kinds: pd.DataFrame, share: float):
    """The role's finding: what each kind exposes and overlap would hide, priced by the replay."""
    by_kind = kinds.groupby("kind")[["ms", "hideable_ms", "ops"]].mean()
    sync = by_kind[by_kind.index.isin(spec["kinds"])]
    gather = by_kind[by_kind.index.isin(spec["gather_kinds"])]
    words = [
        f"{row.ms:.2f} ms of {role} gradient {SYNC_WORDS.get(k, k)} ({row.ops:.0f} ops)" for k, row in sync.iterrows()
    ]
    words += [f"{row.ms:.2f} ms of parameter all-gather" for _, row in gather.iterrows()]
    advice = [spec["advice"]["sync"]] if len(sync) else []
    advice += [spec["advice"]["gather"]] if len(gather) else []
    claim = priced(inputs.step_model, _hidden(inputs.step_model, role, list(sync.index), list(gather.index)))
    longest = events_of(inputs.comm_events, ranks, role, str(by_kind.index[0]))["evidence_id"].head(evidence_cap())
    return Finding(
        finding_type="gradient_allreduce_exposed",
        scope="rank",
        rank_ids=ranks,
        evidence_ids=list(longest),
        statistic={"name": "hideable exposed sync share of step", "value": share, "threshold": spec["share_min"]},
        values={
            "ranks": ", ".join(map(str, ranks)),
            "role": role,
            "kind": str(sync.index[0]) if len(sync) else str(gather.index[0]),
            "exposed": " and ".join(words),
            "exposed_ms": float(by_kind["ms"].sum()),
            "hideable_ms": float(by_kind["hideable_ms"].sum()),
            "advice": "; ".join(advice),
            "share": share,
            "saved_ms": claim["recoverable_ms_per_step"],
        },
        limitations=[
            "priced by replaying the step with every bucket but each step's last hidden under the backward "
            "(no backward is left to hide the last) and the parameter all-gather under the next forward; "
            "the backward and forward must be long enough to hide them"
        ],
        **claim,
    )


def _hidden(model: StepModel, role: str, sync: list[str], gather: list[str]) -> WhatIf:
    """The step with the role's sync collectives (``sync`` kinds) hidden but each step's last, and its
    parameter all-gathers (``gather``) hidden: their transit 0 in the replay."""
    rows = model.rows
    if not len(rows) or "kind" not in rows.columns:
        return scaled_transit(model, pd.Series(dtype=float))
    mine = rows[rows["parallel_role"].fillna(UNKNOWN_ROLE).astype(str).eq(role)]
    steps = model.slots["step_key"].to_numpy()[mine["slot"].to_numpy(np.int64)]
    mine = mine.assign(step=steps)
    synced = mine[mine["kind"].isin(sync)]
    last = synced.groupby("step")["instance"].transform("max")
    hidden = set(synced.loc[synced["instance"] < last, "alignment_id"]) | set(
        mine.loc[mine["kind"].isin(gather), "alignment_id"]
    )
    return scaled_transit(model, pd.Series(0.0, index=sorted(hidden), dtype=float))
