"""A serving capture's findings: serving_host_gap, the device idling between forwards while the host
readies the next; eager_fallback, forwards run eager though their batch's graph was captured.

serving_host_gap.

An inference capture without profiler steps is a run of forwards, each starting where the rank's previous
one ended (segment's ``forward_heads``): its head is the device's idle while the host applied the last
forward's sampled tokens, scheduled the next batch, prepared its inputs and launched it. A host that does
that while the device still runs the previous forward (vLLM's async scheduling) leaves only the first
kernel's launch in flight (``gap_floor_us``); one that waits for each forward to end before it starts
leaves the device idle for all of it. The finding names the ranks whose heads beyond that floor hold
enough of their forwards' wall, says what the host did there where its trace tells (the head gaps'
causes in host_idle_gaps), and is priced by replaying the forwards with each head cut to the floor.

eager_fallback. A forward replayed from a captured graph (FULL, or PIECEWISE around the attention) runs
its kernels back to back; one launched eager waits for the host between kernels. A forward that ran eager
while the rank replayed a graph for the same phase and at least its tokens had a graph it did not use (a
DP peer's prefill forcing every rank eager, a batch the runner did not dispatch to its graph). Priced by
the capture's own yardstick: each gap between its kernels cut to the median gap inside the rank's replays
of that phase (forward_gaps), replayed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from npuprof.pipeline import schema
from npuprof.pipeline.evidence_ids import step_evidence_id
from npuprof.pipeline.idle_cause_names import cause_column, cause_names
from npuprof.pipeline.io import int_ranks
from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.detectors.host_causes import read_host_gaps
from npuprof.pipeline.stages.diagnostics.findings import Finding, priced, rule
from npuprof.pipeline.stages.diagnostics.rank_kernels import scan_kernels_in_steps
from npuprof.pipeline.stages.diagnostics.registry import derived_input, detector
from npuprof.pipeline.stages.diagnostics.retiming import close_windows
from npuprof.pipeline.summaries.gap_kinds import head_idle_name

if TYPE_CHECKING:
    from npuprof.pipeline.stages.base import RootContext

STEP_READS = ("rank_id", "step_ordinal", "complete", "wall_ms", "start_us", "head_ms", "start_source")


@derived_input("forward_host_gaps")
def forward_host_gaps(ctx: RootContext) -> pd.DataFrame:
    """The host-caused gaps before the forwards (host_idle_gaps' heads of forwards that start where the
    one before ended), with the µs of each cause: empty without a host trace."""
    gaps = read_host_gaps(ctx)
    return gaps[gaps["between_forwards"]]


def _forwards(steps: pd.DataFrame) -> pd.DataFrame:
    """The forwards that start where their rank's previous one ended, complete ones where a rank has any."""
    forwards = steps[steps["start_source"] == schema.AFTER_PREVIOUS_FORWARD]
    complete = forwards["complete"].astype(bool)
    return forwards[complete | ~complete.groupby(forwards["rank_id"]).transform("any")]


def _cut_us(forwards: pd.DataFrame, spec: dict) -> np.ndarray:
    """Per forward: the µs of its gap beyond the launch in flight (``gap_floor_us``); none for a gap longer
    than ``waiting_gap_ms``, where the server had nothing to run (no request had arrived): no host
    readies a forward faster for that."""
    head_us = forwards["head_ms"].to_numpy(float) * 1000.0
    waiting = head_us > float(spec["waiting_gap_ms"]) * 1000.0
    return np.where(waiting, 0.0, np.clip(head_us - float(spec["gap_floor_us"]), 0.0, None))


def _per_rank(forwards: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """Per rank: its forwards, their gap p50 (µs), wall (head included), the gap beyond the floor (ms)
    and its share of the wall."""
    head_us = forwards["head_ms"].to_numpy(float) * 1000.0
    beyond = forwards.assign(beyond_ms=_cut_us(forwards, spec) / 1000.0, head_us=head_us)
    per_rank = beyond.groupby("rank_id").agg(
        forwards=("step_ordinal", "size"),
        gap_p50_us=("head_us", "median"),
        wall_ms=("wall_ms", "sum"),
        beyond_ms=("beyond_ms", "sum"),
    )
    per_rank["device_p50_us"] = (beyond["wall_ms"] * 1000.0 - beyond["head_us"]).groupby(beyond["rank_id"]).median()
    per_rank["share"] = per_rank["beyond_ms"] / per_rank["wall_ms"].where(per_rank["wall_ms"] > 0, np.nan)
    return per_rank.fillna({"share": 0.0})


def _host_doing(gaps: pd.DataFrame, spec: dict) -> tuple[str, str | None]:
    """What the host did in the gaps (``gaps``: forward_host_gaps of the named ranks), in words, and the
    cause holding most of their time (None without a host trace)."""
    if gaps.empty:
        return spec["host_unknown"], None
    causes = [c for c in cause_names() if cause_column(c) in gaps]
    held = pd.Series({c: float(gaps[cause_column(c)].sum()) for c in causes})
    cause = str(held.idxmax())
    share = held[cause] / held.sum() if held.sum() > 0 else 0.0
    words = spec["host_words"].get(cause, spec["host_words"]["other"]).format(cause=cause)
    return f"{words} ({share:.0%} of the gaps' time, host trace)", cause


def _evidence(inputs: DiagnosisContext, forwards: pd.DataFrame, ranks: list[int], spec: dict) -> list[str]:
    """The longest gaps before forwards as idle windows, then the steps (forwards) they open; none the server
    spent waiting for requests (``waiting_gap_ms``), which the finding does not claim."""
    bubbles, most_us = inputs.bubbles, float(spec["waiting_gap_ms"]) * 1000.0
    heads = bubbles[bubbles["rank_id"].isin(ranks) & (bubbles["kind"] == head_idle_name())]
    heads = heads[heads["duration_us"] <= most_us]
    windows = heads.sort_values("duration_us", ascending=False)["evidence_id"].tolist()
    mine = forwards[forwards["rank_id"].isin(ranks) & (forwards["head_ms"] * 1000.0 <= most_us)]
    mine = mine.sort_values("head_ms", ascending=False)
    return windows + [step_evidence_id(r, o) for r, o in zip(mine["rank_id"], mine["step_ordinal"])]


@detector(
    finding_types=("serving_host_gap",),
    reads={
        "steps": STEP_READS,
        "bubbles": ("rank_id", "kind", "duration_us", "evidence_id"),
        "forward_host_gaps": (),
        "step_model": (),
    },
)
def serving_host_gap(inputs: DiagnosisContext) -> list[Finding]:
    """One finding over the ranks whose gaps between forwards, beyond the launch in flight, hold at least
    ``share_min`` of their forwards' wall."""
    spec = rule("serving_host_gap")
    if inputs.steps.empty or "start_source" not in inputs.steps:
        return []
    forwards = _forwards(inputs.steps)
    floor_us = float(spec["gap_floor_us"])
    per_rank = _per_rank(forwards, spec)
    hit = (per_rank["share"] >= spec["share_min"]) & (per_rank["forwards"] >= spec["min_forwards"])
    if not hit.any():
        return []
    ranks = [int(r) for r in per_rank.index[hit.to_numpy()]]
    chosen = per_rank.loc[ranks]
    mine = forwards[forwards["rank_id"].isin(ranks)]
    windows = pd.DataFrame(
        {
            "rank_id": mine["rank_id"],
            "start_us": mine["start_us"].to_numpy(float) + floor_us,
            "duration_us": _cut_us(mine, spec),
        }
    )
    waiting = int((mine["head_ms"] > float(spec["waiting_gap_ms"])).sum())
    gaps = inputs.forward_host_gaps
    doing, cause = _host_doing(gaps[gaps["rank_id"].isin(ranks)], spec)
    return [
        Finding(
            finding_type="serving_host_gap",
            scope="rank",
            rank_ids=ranks,
            evidence_ids=_evidence(inputs, forwards, ranks, spec),
            statistic={
                "name": "idle_between_forwards_share",
                "value": float(chosen["share"].min()),
                "threshold": float(spec["share_min"]),
                "test": f"idle between forwards beyond {floor_us:.0f} µs, share of the forwards' wall",
            },
            values={
                "ranks": ", ".join(map(str, ranks)),
                "forwards": int(chosen["forwards"].sum()),
                "gap_p50_us": float(chosen["gap_p50_us"].median()),
                "device_p50_us": float(chosen["device_p50_us"].median()),
                "share": float(chosen["beyond_ms"].sum() / chosen["wall_ms"].sum()),
                "floor_us": floor_us,
                "host_doing": doing,
                "host_cause": cause,
            },
            limitations=([] if cause else [spec["host_unknown_limitation"]])
            + ([spec["waiting_limitation"].format(count=waiting, **spec)] if waiting else []),
            **priced(inputs.step_model, close_windows(inputs.step_model, windows[windows["duration_us"] > 0])),
        )
    ]


FORWARD_COLUMNS = ["rank_id", "step_ordinal", "phase", "tokens", "graph_mode", "start_ns", "end_ns"]
GAP_COLUMNS = ["rank_id", "step_ordinal", "start_ns", "gap_us"]


def fallbacks(forwards: pd.DataFrame) -> pd.Series:
    """Per forward (forward_summary rows): it ran eager while its rank replayed a graph (full or piecewise)
    for the same phase at least as many tokens."""
    replayed = forwards[forwards["graph_mode"] != "eager"]
    largest = replayed.groupby(["rank_id", "phase"])["tokens"].max()
    keys = pd.MultiIndex.from_frame(forwards[["rank_id", "phase"]])
    covered = forwards["tokens"].to_numpy(float) <= largest.reindex(keys).to_numpy(float)
    return pd.Series((forwards["graph_mode"] == "eager").to_numpy() & covered, index=forwards.index)


def _gaps_inside(forwards: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """The device's idle gaps between consecutive tasks inside each of ``forwards`` (one rank's, by start),
    from ``events`` (start_ns, end_ns): step_ordinal, start_ns, gap_us."""
    events = events.sort_values("start_ns", kind="stable")
    start, end = events["start_ns"].to_numpy(np.int64), events["end_ns"].to_numpy(np.int64)
    if len(start) < 2 or forwards.empty:
        return pd.DataFrame(columns=GAP_COLUMNS[1:])
    forwards = forwards.sort_values("start_ns")
    at = np.searchsorted(forwards["start_ns"].to_numpy(np.int64), start, side="right") - 1
    inside = (at >= 0) & (start <= forwards["end_ns"].to_numpy(np.int64)[np.clip(at, 0, None)])
    busy_until = np.maximum.accumulate(end)[:-1]
    same = inside[1:] & inside[:-1] & (at[1:] == at[:-1])  # both tasks in one forward: not its head
    gap = np.clip(start[1:] - busy_until, 0, None)
    ordinal = forwards["step_ordinal"].to_numpy(np.int64)[np.clip(at[1:], 0, None)]
    return pd.DataFrame({"step_ordinal": ordinal[same], "start_ns": busy_until[same], "gap_us": gap[same] / 1e3})


@derived_input("forward_gaps")
def forward_gaps(ctx: RootContext) -> pd.DataFrame:
    """The gaps between device tasks inside the forwards eager_fallback compares: each rank's eager forwards
    that had a graph (``fallbacks``) and its replays of the same phases (rank_id, step_ordinal, start_ns,
    gap_us). Empty for a capture without such forwards."""
    forwards = ctx.read_frame(schema.FORWARD_SUMMARY)
    if forwards.empty:
        return pd.DataFrame(columns=GAP_COLUMNS)
    forwards = int_ranks(forwards)[FORWARD_COLUMNS]
    fell = fallbacks(forwards)
    phases = forwards[fell][["rank_id", "phase"]].drop_duplicates()
    compared = forwards.merge(phases, on=["rank_id", "phase"])
    compared = compared[compared["graph_mode"] != "eager"]
    compared = pd.concat([forwards[fell], compared], ignore_index=True)
    if compared.empty:
        return pd.DataFrame(columns=GAP_COLUMNS)
    scanned = scan_kernels_in_steps(
        ctx,
        ["start_ns", "end_ns"],
        lambda rank, events: _gaps_inside(compared[compared["rank_id"] == rank], events),
        ranks=set(int(r) for r in compared["rank_id"]),
        op_types=None,  # every device task: a collective holds the device as a kernel does
    )
    parts = [gaps.assign(rank_id=rank) for rank, gaps in scanned if len(gaps)]
    return pd.concat(parts, ignore_index=True)[GAP_COLUMNS] if parts else pd.DataFrame(columns=GAP_COLUMNS)


@derived_input("forwards")
def forwards_input(ctx: RootContext) -> pd.DataFrame:
    """forward_summary of every rank (FORWARD_COLUMNS): an inference capture's forwards."""
    frame = ctx.read_frame(schema.FORWARD_SUMMARY)
    return int_ranks(frame)[FORWARD_COLUMNS] if len(frame) else pd.DataFrame(columns=FORWARD_COLUMNS)


def _cuts(forwards: pd.DataFrame, gaps: pd.DataFrame) -> pd.DataFrame:
    """The gaps inside the fallback forwards beyond the median gap inside the rank's replays of their phase
    (rank_id, step_ordinal, phase, start_ns, gap_us, yardstick_us, cut_us)."""
    keyed = gaps.merge(forwards[["rank_id", "step_ordinal", "phase", "graph_mode"]], on=["rank_id", "step_ordinal"])
    replayed = keyed[keyed["graph_mode"] != "eager"]
    yardstick = replayed.groupby(["rank_id", "phase"])["gap_us"].median().rename("yardstick_us").reset_index()
    eager = keyed[keyed["graph_mode"] == "eager"].merge(yardstick, on=["rank_id", "phase"])
    return eager.assign(cut_us=np.clip(eager["gap_us"] - eager["yardstick_us"], 0.0, None))


@detector(
    finding_types=("eager_fallback",),
    reads={
        "forwards": (),
        "forward_gaps": (),
        "steps": ("rank_id", "step_ordinal", "complete", "wall_ms"),
        "step_model": (),
    },
)
def eager_fallback(inputs: DiagnosisContext) -> list[Finding]:
    """One finding over the ranks whose eager forwards with a captured graph lose at least ``share_min``
    of the ranks' wall in the gaps between their kernels beyond the replays' own."""
    spec = rule("eager_fallback")
    forwards, gaps = inputs.forwards, inputs.forward_gaps
    if forwards.empty or gaps.empty:
        return []
    fell = forwards[fallbacks(forwards)]
    cuts = _cuts(forwards, gaps)
    cuts = cuts.merge(fell[["rank_id", "step_ordinal"]], on=["rank_id", "step_ordinal"])
    wall = inputs.steps.groupby("rank_id")["wall_ms"].sum()
    per_rank = cuts.groupby("rank_id")["cut_us"].sum() / 1000.0
    share = per_rank / wall.reindex(per_rank.index)
    hit = share[(share >= spec["share_min"])]
    if hit.empty:
        return []
    ranks = [int(r) for r in hit.index]
    mine, chosen = cuts[cuts["rank_id"].isin(ranks)], fell[fell["rank_id"].isin(ranks)]
    by_forward = mine.groupby(["rank_id", "step_ordinal"])["cut_us"].sum().sort_values(ascending=False)
    windows = pd.DataFrame(
        {
            "rank_id": mine["rank_id"],
            "start_us": (mine["start_ns"].to_numpy(np.int64) / 1000.0) + mine["yardstick_us"].to_numpy(float),
            "duration_us": mine["cut_us"],
        }
    )
    return [
        Finding(
            finding_type="eager_fallback",
            scope="rank",
            rank_ids=ranks,
            evidence_ids=[step_evidence_id(r, o) for r, o in by_forward.index],
            statistic={
                "name": "eager_fallback_gap_share",
                "value": float(hit.min()),
                "threshold": float(spec["share_min"]),
                "test": "gaps between the kernels of eager forwards beyond the replays', share of the ranks' wall",
            },
            values={
                "ranks": ", ".join(map(str, ranks)),
                "count": int(len(chosen)),
                "per_rank": int(chosen.groupby("rank_id").size().max()),
                "phases": ", ".join(sorted(chosen["phase"].astype(str).unique())),
                "tokens": ", ".join(str(t) for t in sorted(chosen["tokens"].dropna().astype(int).unique())),
                "eager_gap_us": float(mine["gap_us"].median()),
                "graph_gap_us": float(mine["yardstick_us"].median()),
                "ms_per_forward": float(by_forward.mean()) / 1000.0,
            },
            limitations=[spec["padding_limitation"]],
            **priced(inputs.step_model, close_windows(inputs.step_model, windows[windows["duration_us"] > 0])),
        )
    ]
