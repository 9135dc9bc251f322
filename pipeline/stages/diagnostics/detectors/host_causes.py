"""Causes of idle time: the device's own memory copies in the step, and on the host operators compiled in
the step, blocking syncs, dataloader stalls, GC pauses, device memory allocation and launch-bound steps.

The evidence stage split every idle gap of every step among its host causes
(stages/evidence/idle_causes.py). A cause becomes a finding where it holds enough of the ranks' wall;
one finding per cause names every rank over its threshold, and is priced by closing those gaps on
all of them at once (ranks that meet in collectives only gain when every one of them stops waiting).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from npuprof.pipeline import io, schema
from npuprof.pipeline.evidence_ids import step_evidence_id
from npuprof.pipeline.idle_cause_names import COPY, LAUNCH, cause_column
from npuprof.pipeline.io import int_ranks
from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, priced, rule
from npuprof.pipeline.stages.diagnostics.registry import derived_input, detector
from npuprof.pipeline.stages.diagnostics.retiming import close_windows

if TYPE_CHECKING:
    from npuprof.pipeline.stages.base import RootContext

FINDING_OF_CAUSE = {
    COPY: "memcpy_in_step",
    "compile": "dynamic_shape_recompile",
    "sync": "blocking_sync_in_step",
    "dataloader": "dataloader_stall",
    "gc": "gc_pause",
    "allocation": "allocation_heavy",
    LAUNCH: "host_launch_bound",
}
GAP_COLUMNS = ["rank_id", "step_ordinal", "start_ns", "after_name", *(cause_column(c) for c in FINDING_OF_CAUSE)]


def read_host_gaps(ctx: RootContext) -> pd.DataFrame:
    """The idle gaps the host caused, per rank (host_idle_gaps), with the µs of each cause, and whether
    each is the gap before a forward that starts where the one before ended (``between_forwards``: the
    host's turn between forwards, serving_host_gap's, not a gap inside a step)."""
    if not (ctx.out_dir / schema.HOST_IDLE_GAPS.path).exists():
        return pd.DataFrame(columns=[*GAP_COLUMNS, "between_forwards"]).astype({"between_forwards": bool})
    gaps = int_ranks(ctx.read_table(schema.HOST_IDLE_GAPS, columns=GAP_COLUMNS).to_pandas())
    keys = ["rank_id", "step_ordinal", "start_ns"]
    steps = int_ranks(ctx.read_table(schema.STEP_SEGMENTS, columns=[*keys, "start_source"]).to_pandas())
    forwards = steps.loc[steps["start_source"] == schema.AFTER_PREVIOUS_FORWARD, keys]
    heads = pd.MultiIndex.from_frame(forwards.astype("int64"))
    return gaps.assign(between_forwards=pd.MultiIndex.from_frame(gaps[keys].astype("int64")).isin(heads))


@derived_input("host_gaps")
def host_gaps(ctx: RootContext) -> pd.DataFrame:
    """The idle gaps the host caused inside the ranks' steps (``read_host_gaps`` without the gaps between
    forwards), with the µs of each cause."""
    gaps = read_host_gaps(ctx)
    return gaps[~gaps["between_forwards"]].drop(columns="between_forwards")


@derived_input("copies_in_steps")
def copies_in_steps(ctx: RootContext) -> pd.DataFrame:
    """The device's memory copies inside the ranks' steps (device_copies), with their rank."""
    columns = ["rank_id", "step_ordinal", "duration_us", "bytes", "direction"]
    if not (ctx.out_dir / schema.DEVICE_COPIES.path).exists():
        return pd.DataFrame(columns=columns)
    return int_ranks(ctx.read_table(schema.DEVICE_COPIES, columns=columns).to_pandas())


def _copy_values(copies: pd.DataFrame, counted: pd.DataFrame, ranks: list[int]) -> dict:
    """What the copies of ``ranks`` over their counted steps move: how many per rank, MB per step, the directions,
    and the bandwidth they ran at (``moved``: in words, for a capture that gives no sizes too)."""
    keys = ["rank_id", "step_ordinal"]
    mine = copies[copies["rank_id"].isin(ranks)].merge(counted[keys], on=keys)
    steps = max(len(counted[counted["rank_id"].isin(ranks)]), 1)
    sized = mine[mine["bytes"].notna()]
    megabytes = float(sized["bytes"].sum()) / 1e6 / steps
    gbps = float(sized["bytes"].sum()) / float(sized["duration_us"].sum()) / 1e3 if len(sized) else 0.0
    directions = mine["direction"].dropna().value_counts()
    return {
        "copies_per_rank": len(mine) / len(ranks),
        "mb_per_step": megabytes if len(sized) else None,
        "gbps": gbps if len(sized) else None,
        "moved": f"{megabytes:.1f} MB per step at {gbps:.1f} GB/s" if len(sized) else "sizes not recorded",
        "directions": ", ".join(directions.index.astype(str)) or "direction not recorded",
    }


@derived_input("idle_by_cause")
def idle_by_cause(ctx: RootContext) -> pd.DataFrame:
    """Idle ms per rank, step and cause (the idle_by_cause rows of step_time_accounting)."""
    if not (ctx.out_dir / schema.IDLE_BY_CAUSE.path).exists():
        return pd.DataFrame(columns=["rank_id", "step_ordinal", "component", "ms"])
    return int_ranks(ctx.read_frame(schema.IDLE_BY_CAUSE))


@derived_input("launch_floor")
def launch_floor(ctx: RootContext) -> dict[int, float]:
    """Per rank: its median gap between kernels it had queued (µs; evidence's manifest)."""
    manifest = io.read_json_or_empty(ctx.out_dir / schema.stage_manifest_name("evidence"))
    by_rank = (manifest.get("host_trace") or {}).get("by_rank") or {}
    return {int(r): float(v["queued_gap_median_us"]) for r, v in by_rank.items() if "queued_gap_median_us" in v}


def _counted_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """Each rank's complete steps (all its steps where none is complete)."""
    complete = steps["complete"].astype(bool)
    has_complete = complete.groupby(steps["rank_id"]).transform("any")
    return steps[complete | ~has_complete]


def _per_rank(inputs: DiagnosisContext, cause: str, counted: pd.DataFrame) -> pd.DataFrame:
    """Per rank over its counted steps: ms of ``cause``, wall, share, steps with it, largest gap."""
    keys = ["rank_id", "step_ordinal"]
    rows = inputs.idle_by_cause
    rows = rows[rows["component"] == cause].merge(counted[keys], on=keys)
    wall = counted.groupby("rank_id")["wall_ms"].sum()
    ms = rows.groupby("rank_id")["ms"].sum().reindex(wall.index, fill_value=0.0)
    gaps = inputs.host_gaps.merge(counted[keys], on=keys)
    column = cause_column(cause)
    gaps = gaps[gaps[column] > 0]
    return pd.DataFrame(
        {
            "ms": ms,
            "wall_ms": wall,
            "share": ms / wall.where(wall > 0, np.nan),
            "steps": counted.groupby("rank_id").size(),
            "steps_with": rows.groupby("rank_id")["step_ordinal"].nunique().reindex(wall.index, fill_value=0),
            "largest_ms": gaps.groupby("rank_id")[column].max().reindex(wall.index, fill_value=0.0) / 1000.0,
            "gaps_per_step": gaps.groupby("rank_id").size().reindex(wall.index, fill_value=0)
            / counted.groupby("rank_id").size(),
        }
    ).fillna({"share": 0.0})


def _qualifies(per_rank: pd.DataFrame, cause: str, spec: dict) -> tuple[pd.Series, str, pd.Series, float]:
    """Which ranks qualify, and the statistic (name, per-rank values, threshold) they are tested on."""
    if cause == "gc":
        return (
            per_rank["largest_ms"] >= spec["pause_min_ms"],
            "largest_gc_pause_ms",
            per_rank["largest_ms"],
            spec["pause_min_ms"],
        )
    hit = per_rank["share"] >= spec["share_min"]
    if cause == LAUNCH:
        hit &= per_rank["gaps_per_step"] >= spec["min_late_launches_per_step"]
    return hit, "idle_share_of_wall", per_rank["share"], spec["share_min"]


def _windows(inputs: DiagnosisContext, cause: str, ranks: list[int]) -> pd.DataFrame:
    """The part of each gap of ``ranks`` that ``cause`` holds, as windows to close: a launch gap
    only down to the rank's own gap between queued kernels (the device never runs back to back)."""
    gaps = inputs.host_gaps[inputs.host_gaps["rank_id"].isin(ranks)]
    cut = gaps[cause_column(cause)].to_numpy(float)
    if cause == LAUNCH:
        floor = gaps["rank_id"].map(inputs.launch_floor).fillna(0.0).to_numpy(float)
        cut = np.clip(cut - floor, 0.0, None)
    windows = pd.DataFrame({"rank_id": gaps["rank_id"], "start_us": gaps["start_ns"] / 1000.0, "duration_us": cut})
    return windows[windows["duration_us"] > 0]


def _evidence(inputs: DiagnosisContext, cause: str, ranks: list[int]) -> tuple[list[str], list[str]]:
    """Idle windows of the cause (largest first), the steps it holds most of, and for launch-bound
    ranks the operators the device waited for most; and the names of those kernels."""
    bubbles = inputs.bubbles
    mine = bubbles[bubbles["rank_id"].isin(ranks) & (bubbles["cause"] == cause)]
    windows = mine.sort_values("duration_us", ascending=False)["evidence_id"].tolist()
    rows = inputs.idle_by_cause
    rows = rows[rows["rank_id"].isin(ranks) & (rows["component"] == cause)].sort_values("ms", ascending=False)
    steps = [step_evidence_id(r, o) for r, o in zip(rows["rank_id"], rows["step_ordinal"])]
    gaps = inputs.host_gaps[inputs.host_gaps["rank_id"].isin(ranks)]
    waited = gaps.groupby("after_name")[cause_column(cause)].sum().sort_values(ascending=False)
    top = [str(n) for n in waited[waited > 0].index[:3]]
    if cause != LAUNCH:
        return windows + steps, top
    operators = inputs.operators
    cited = operators[operators["rank_id"].isin(ranks) & operators["name"].isin(top)]["evidence_id"].tolist()
    return cited + windows + steps, top


@detector(
    finding_types=tuple(FINDING_OF_CAUSE.values()),
    reads={
        "idle_by_cause": (),
        "host_gaps": (),
        "launch_floor": (),
        "copies_in_steps": (),
        "steps": ("rank_id", "step_ordinal", "complete", "wall_ms"),
        "bubbles": ("rank_id", "evidence_id", "duration_us", "cause"),
        "operators": ("rank_id", "name", "evidence_id"),
        "step_model": (),
    },
)
def host_causes(inputs: DiagnosisContext) -> list[Finding]:
    """One finding per host cause that holds enough of some ranks' wall."""
    if inputs.idle_by_cause.empty or inputs.steps.empty:
        return []
    counted = _counted_steps(inputs.steps)
    findings = []
    for cause, finding_type in FINDING_OF_CAUSE.items():  # a loop over the causes
        spec = rule(finding_type)
        per_rank = _per_rank(inputs, cause, counted)
        hit, statistic, values, threshold = _qualifies(per_rank, cause, spec)
        if not hit.any():
            continue
        ranks = [int(r) for r in per_rank.index[hit.to_numpy()]]
        chosen = per_rank.loc[ranks]
        evidence, kernels = _evidence(inputs, cause, ranks)
        closed = close_windows(inputs.step_model, _windows(inputs, cause, ranks))
        findings.append(
            Finding(
                finding_type=finding_type,
                scope="rank",
                rank_ids=ranks,
                evidence_ids=evidence,
                statistic={"name": statistic, "value": float(values.loc[ranks].min()), "threshold": float(threshold)},
                values={
                    "ranks": ranks,
                    "ms_per_step": float((chosen["ms"] / chosen["steps"]).mean()),
                    "share": float(chosen["share"].mean()),
                    "steps_with": int(chosen["steps_with"].max()),
                    "total": int(chosen["steps"].max()),
                    "largest_ms": float(chosen["largest_ms"].max()),
                    "late_launches_per_step": float(chosen["gaps_per_step"].mean()),
                    "kernels": ", ".join(kernels) or "?",
                    **(_copy_values(inputs.copies_in_steps, counted, ranks) if cause == COPY else {}),
                },
                **priced(inputs.step_model, closed),
            )
        )
    return findings
