"""block_dim_underuse: long AI Core / vector kernels launched with a block dim that leaves cores idle.

A kernel's blocks run one per core per wave; ``block_dim ÷ (waves × cores)`` of the cores work, and the
rest of the kernel's time is what spreading its work over every core would save. The core counts are
the rank's own (CANN's ``info.json``: ``ai_core_num``, ``aiv_num``), else the chosen hardware's
(``hardware_insights.json``); a rank with neither is not judged, and the stage says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from npuprof.pipeline import io, schema
from npuprof.pipeline.distinct import text_array
from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, priced, rule
from npuprof.pipeline.stages.diagnostics.rank_kernels import scan_kernels_in_steps
from npuprof.pipeline.stages.diagnostics.registry import derived_input, detector
from npuprof.pipeline.stages.diagnostics.retiming import close_windows
from npuprof.pipeline.stages.diagnostics.step_scale import mean_step_wall_ms, steps_per_rank

if TYPE_CHECKING:
    from npuprof.pipeline.stages.base import RootContext

FINDING = "block_dim_underuse"
WIDTH_COLUMNS = ["rank_id", "name", "core", "block_dim", "cores", "utilization", "start_us", "duration_us", "idle_us"]


def rank_core_counts(capture: dict, hardware: dict) -> dict[int, dict[str, int | None]]:
    """Per rank, its cube and vector core counts: the capture's own, else the chosen hardware's."""
    facts = (hardware.get("facts") or {}) if hardware.get("name") else {}  # only a named SoC's counts
    counts = {}
    for rank in capture.get("ranks", []):
        counts[int(rank["rank_id"])] = {
            "cube": rank.get("ai_core_count") or facts.get("cube_core_count"),
            "vector": rank.get("vector_core_count") or facts.get("vector_core_count"),
        }
    return counts


@derived_input("core_counts")
def core_counts(ctx: RootContext) -> dict[int, dict[str, int | None]]:
    """Per rank, its cube and vector core counts (None where neither the capture nor the hardware says)."""
    return rank_core_counts(
        io.read_json_or_empty(ctx.out_dir / schema.CAPTURE_INFO),
        io.read_json_or_empty(ctx.out_dir / schema.HARDWARE_INSIGHTS),
    )


def launch_utilization(block_dim: np.ndarray, cores: np.ndarray) -> np.ndarray:
    """The share of the cores a launch keeps busy: its blocks over the core slots of the waves they take."""
    waves = np.ceil(block_dim / cores)
    return block_dim / (waves * cores)


@derived_input("launch_widths")
def launch_widths(ctx: RootContext) -> pd.DataFrame:
    """Calls of AI Core / vector kernels inside the ranks' steps that leave cores idle past the rule (long
    enough to count), on the ranks whose core counts are known: WIDTH_COLUMNS."""
    spec = rule(FINDING)
    counts = core_counts(ctx)
    judged = {rank for rank, own in counts.items() if own["cube"] and own["vector"]}
    long_launches = (pc.field("block_dim") > 0) & (pc.field("duration_ns") >= int(spec["min_call_us"] * 1000))
    columns = ["name", "accelerator_core", "block_dim", "start_ns", "duration_ns"]
    parts = [
        widths
        for _, widths in scan_kernels_in_steps(
            ctx,
            columns,
            lambda rank, events: _rank_widths(rank, events, counts[rank], spec),
            ranks=judged,
            where=long_launches,
            dictionary=("name", "accelerator_core"),
        )
    ]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=WIDTH_COLUMNS)


def _rank_widths(rank: int, events: pd.DataFrame, cores: dict, spec: dict) -> pd.DataFrame:
    """The rank's launches at or below the rule's utilization; ``events``' name and accelerator_core are
    categoricals, so the core kinds and widths are looked up per category and only kept rows get texts."""
    accelerators = events["accelerator_core"].cat
    kind_of = pd.Series(accelerators.categories, dtype=object).map(spec["cores_by_accelerator"])
    width_of = kind_of.map(cores).to_numpy(float)
    codes = accelerators.codes.to_numpy()
    known = codes >= 0
    known[known] = kind_of.notna().to_numpy()[codes[known]]
    rows = np.flatnonzero(known)
    width = width_of[codes[rows]]
    utilization = launch_utilization(events["block_dim"].to_numpy(float)[rows], width)
    kept = utilization <= spec["utilization_max"]
    rows, width, utilization = rows[kept], width[kept], utilization[kept]
    duration_us = events["duration_ns"].to_numpy(float)[rows] / 1000.0
    names = events["name"].cat
    return pd.DataFrame(
        {
            "rank_id": rank,
            "name": text_array(names.codes.to_numpy()[rows], names.categories),
            "core": kind_of.to_numpy()[codes[rows]],
            "block_dim": events["block_dim"].to_numpy()[rows],
            "cores": width.astype(np.int64),
            "utilization": utilization,
            "start_us": events["start_ns"].to_numpy()[rows] / 1000.0,
            "duration_us": duration_us,
            "idle_us": duration_us * (1.0 - utilization),
        }
    ).astype({"core": "str"})  # a text column even where no row is kept


@detector(
    finding_types=(FINDING,),
    reads={
        "launch_widths": (),
        "core_counts": (),
        "steps": ("rank_id", "step_ordinal", "complete", "wall_ms"),
        "operators": ("rank_id", "name", "evidence_id"),
        "step_model": (),
    },
)
def block_dim_underuse(inputs: DiagnosisContext) -> list[Finding]:
    """One finding per kernel (name, core kind, block dim) whose idle cores cost the rule's share of the step."""
    spec, widths, steps = rule(FINDING), inputs.launch_widths, inputs.steps
    unjudged = [rank for rank, own in sorted(inputs.core_counts.items()) if not own["cube"] or not own["vector"]]
    if unjudged:
        inputs.not_judging(
            FINDING,
            f"ranks {', '.join(map(str, unjudged))} name no core counts (CANN's PROF_*/device_*/info.json) and no "
            "hardware was chosen: pass --hardware-model to judge their kernels' block dims",
        )
    if widths.empty or steps.empty:
        return []
    findings = []
    for kernel in _costly_kernels(widths, steps, spec).itertuples(index=False):  # a loop over flagged kernels
        same = (widths["name"] == kernel.name) & (widths["core"] == kernel.core)
        calls = widths[same & (widths["block_dim"] == kernel.block_dim)]
        ranks = sorted(calls["rank_id"].unique().tolist())
        operators = inputs.operators[
            (inputs.operators["name"] == kernel.name) & inputs.operators["rank_id"].isin(ranks)
        ]
        idle_removed = close_windows(inputs.step_model, calls.assign(duration_us=calls["idle_us"]), kernels=True)
        findings.append(
            Finding(
                finding_type=FINDING,
                scope="operator",
                rank_ids=ranks,
                evidence_ids=operators["evidence_id"].tolist(),
                statistic={
                    "name": "core_utilization",
                    "value": float(kernel.utilization),
                    "threshold": spec["utilization_max"],
                },
                values={
                    "name": kernel.name,
                    "core": kernel.core,
                    "block_dim": int(kernel.block_dim),
                    "cores": int(kernel.cores),
                    "utilization": float(kernel.utilization),
                    "ranks": ", ".join(map(str, ranks)),
                    "ms_per_step": float(kernel.idle_ms_per_step),
                    "calls_per_step": float(kernel.calls_per_step),
                },
                limitations=[
                    "the saving assumes the kernel's work splits evenly over every core: an upper bound for a "
                    "kernel whose tiling cannot be made finer"
                ],
                # each call's idle-core share removed, the steps replayed
                **priced(inputs.step_model, idle_removed),
            )
        )
    return findings


def _costly_kernels(widths: pd.DataFrame, steps: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """Per kernel (name, core kind, block dim, cores): its idle-core ms and calls per step (the mean over
    the ranks that run it) and its utilization, where the idle time is the rule's share of the step."""
    step_count, wall_ms = steps_per_rank(steps), mean_step_wall_ms(steps)
    keys = ["name", "core", "block_dim", "cores"]
    per_rank = widths.groupby([*keys, "rank_id"], as_index=False).agg(
        calls=("idle_us", "size"), idle_us=("idle_us", "sum"), utilization=("utilization", "first")
    )
    per_rank["steps"] = per_rank["rank_id"].map(step_count).fillna(1).clip(lower=1)
    per_rank["idle_ms_per_step"] = per_rank["idle_us"] / 1000.0 / per_rank["steps"]
    per_rank["calls_per_step"] = per_rank["calls"] / per_rank["steps"]
    kernels = per_rank.groupby(keys, as_index=False).agg(
        idle_ms_per_step=("idle_ms_per_step", "mean"),
        calls_per_step=("calls_per_step", "mean"),
        utilization=("utilization", "first"),
    )
    return kernels[kernels["idle_ms_per_step"] >= spec["min_step_share"] * wall_ms]
