"""capture_incomplete_group: exposed communication time the captured members of a group spend waiting,
that no other finding explains, while members of that group are missing from the capture.

A ledger-phase detector: it reads the step ledger as the first findings explain it, takes the
"communication <role> <kind> wait" and "... idle" lines left unexplained, and where a rank's share of
them is worth recovering (``share_min`` of its step) and the collective's group has members the capture
does not hold, it names the group, how many are missing, and the op's transit / wait / idle split:
the link is not the problem when transit is a sliver of the elapsed time.
"""

from __future__ import annotations

import pandas as pd

from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, evidence_cap, rule
from npuprof.pipeline.stages.diagnostics.groups import group_members
from npuprof.pipeline.stages.diagnostics.ledger import UNEXPLAINED, collective_words
from npuprof.pipeline.stages.diagnostics.ledger_credit import line_parts
from npuprof.pipeline.stages.diagnostics.registry import detector

WAIT_PARTS = ("wait", "idle")
LEDGER_READS = ("rank_id", "step_ordinal", "complete", "wall_ms", "line", "ms", "explained_by")


def unexplained_waits(ledger: pd.DataFrame) -> pd.DataFrame:
    """Per rank, role and kind: the exposed communication wait and idle no finding explains, in ms per
    complete step and share of the rank's mean step (rank_id, role, kind, ms_per_step, share)."""
    complete = ledger[ledger["complete"].astype(bool)]
    if not len(complete):
        return pd.DataFrame(columns=["rank_id", "role", "kind", "ms_per_step", "share"])
    per_rank = complete.drop_duplicates(["rank_id", "step_ordinal"]).groupby("rank_id")["wall_ms"].agg(["size", "mean"])
    loose = complete[(complete["explained_by"] == UNEXPLAINED) & complete["line"].str.startswith("communication ")]
    loose = pd.concat([loose, line_parts(loose["line"])], axis=1)
    loose = loose[loose["part"].isin(WAIT_PARTS)]
    waits = loose.groupby(["rank_id", "role", "kind"], as_index=False)["ms"].sum()
    steps, walls = per_rank["size"].reindex(waits["rank_id"]).to_numpy(), per_rank["mean"].reindex(waits["rank_id"])
    waits["ms_per_step"] = waits["ms"].to_numpy() / steps
    waits["share"] = waits["ms_per_step"].to_numpy() / walls.where(walls > 0, 1).to_numpy()
    return waits.drop(columns="ms")


def events_of(events: pd.DataFrame, ranks: list[int], role: str, kind: str) -> pd.DataFrame:
    """The communication events (``comm_events``) of ``ranks`` in one role and kind, longest first: the
    rows a finding about that collective cites."""
    mine = events[events["rank_id"].isin(ranks) & (events["kind"] == kind)]
    mine = mine[mine["parallel_role"].fillna("unknown").astype(str) == role]
    return mine.sort_values("duration_us", ascending=False)


@detector(
    finding_types=("capture_incomplete_group",),
    reads={
        "ledger": LEDGER_READS,
        "comm_events": ("rank_id", "name", "kind", "parallel_role", "duration_us", "evidence_id"),
        "comm_ops": ("rank_id", "step_id", "op_name", "group_hash", "elapse_ms", "transit_ms", "wait_ms", "idle_ms"),
        "links": ("group_hash", "src_local_rank", "dst_local_rank"),
        "group_ranks": (),
    },
    phase="ledger",
)
def collective_wait(inputs: DiagnosisContext) -> list[Finding]:
    """The unexplained exposed waits worth recovering in collectives whose group the capture holds only
    in part: one finding per role and kind, on the ranks that wait."""
    spec = rule("capture_incomplete_group")
    waits = unexplained_waits(inputs.ledger)
    hits = waits[waits["share"] >= spec["share_min"]]
    if not len(hits) or not len(inputs.comm_ops):
        return []
    events, ops = inputs.comm_events, inputs.comm_ops
    members = group_members(ops, inputs.links, inputs.group_ranks).set_index("group_hash")
    findings = []
    for (role, kind), chosen in hits.groupby(["role", "kind"]):
        ranks = sorted(int(r) for r in chosen["rank_id"])
        mine = events_of(events, ranks, role, kind)
        op_rows = ops[ops["rank_id"].isin(ranks) & ops["op_name"].isin(set(mine["name"])) & ops["group_hash"].notna()]
        if not len(op_rows):
            continue  # no op names its group: nothing says a member is missing
        group = op_rows.groupby("group_hash")["elapse_ms"].sum().idxmax()
        size, captured = int(members.loc[group, "size"]), members.loc[group, "captured"]
        if size <= len(captured):
            continue  # every member is here: the critical path, not the capture, must say who is late
        in_group = op_rows[op_rows["group_hash"] == group]
        steps = in_group.groupby("rank_id")["step_id"].nunique().sum()
        totals = in_group[["elapse_ms", "transit_ms", "wait_ms", "idle_ms"]].sum() / max(int(steps), 1)
        ms_per_step, share = float(chosen["ms_per_step"].mean()), float(chosen["share"].mean())
        longest = mine["evidence_id"].head(evidence_cap())
        findings.append(
            Finding(
                finding_type="capture_incomplete_group",
                scope="rank",
                rank_ids=ranks,
                evidence_ids=list(longest),
                statistic={
                    "name": "unexplained exposed wait share of step",
                    "value": share,
                    "threshold": spec["share_min"],
                },
                values={
                    "ranks": ", ".join(map(str, ranks)),
                    "role": role,
                    "kind": kind,
                    "collective": collective_words(f"{role} {kind}"),
                    "ms_per_step": ms_per_step,
                    "share": share,
                    "elapse_ms": float(totals["elapse_ms"]),
                    "transit_ms": float(totals["transit_ms"]),
                    "wait_ms": float(totals["wait_ms"]),
                    "idle_ms": float(totals["idle_ms"]),
                    "missing": size - len(captured),
                    "size": size,
                    "captured": ", ".join(map(str, captured)),
                },
                limitations=[
                    f"the capture holds {len(captured)} of the {size} members of this group: what ends the "
                    "wait is not in it, so it is named as the cause of these ms, not priced as a saving"
                ],
                caused_ms_per_step=ms_per_step,
            )
        )
    return findings
