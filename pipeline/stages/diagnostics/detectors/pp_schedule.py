"""pp_stage_imbalance and pp_bubble_heavy: the pipeline schedule read from the kernels (pp_schedule.csv).

A stage that computes much more than the others makes them wait in every P2P exchange; a schedule
with few micro-batches leaves (p - 1) / (m + p - 1) of the pipeline idle even when balanced.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from npuprof.pipeline import csv_formulas, schema
from npuprof.pipeline.evidence_ids import step_evidence_id
from npuprof.pipeline.io import int_ranks
from npuprof.pipeline.modelinfo.configs import parameter_estimate
from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, priced, rule
from npuprof.pipeline.stages.diagnostics.registry import derived_input, detector
from npuprof.pipeline.stages.diagnostics.retiming import WhatIf, close_windows, scaled_transit, scaled_work
from npuprof.pipeline.summaries.pp_schedule import COLUMNS

if TYPE_CHECKING:
    from npuprof.pipeline.stages.base import RootContext


@derived_input("pp_schedule")
def pp_schedule(ctx: RootContext) -> pd.DataFrame:
    """pp_schedule.csv (summarize): per rank and step of a PP group, its stage, passes and time split."""
    path = ctx.out_dir / schema.PP_SCHEDULE_CSV.file
    return csv_formulas.read_csv_view(path) if path.exists() else pd.DataFrame(columns=COLUMNS)


@derived_input("model_fields")
def model_fields(ctx: RootContext) -> dict[str, float]:
    """model_inferred_config.csv (model stage): each field the kernels showed, as a number."""
    path = ctx.out_dir / schema.MODEL_INFERRED_CONFIG_CSV.file
    if not path.exists():
        return {}
    table = csv_formulas.read_csv_view(path, usecols=["field", "value"])
    values = pd.to_numeric(table["value"], errors="coerce")
    return {str(f): float(v) for f, v in zip(table["field"], values) if not math.isnan(v)}


LAYER_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "n_routed_experts",
    "moe_intermediate_size",
    "n_shared_experts",
)


def _parameter_ratio(fields: dict[str, float], stage: int, stages: int, before: float, after: float) -> float | None:
    """How the parameters a stage holds change when it goes from ``before`` to ``after`` decoder layers:
    each layer's (the fingerprint's widths through the standard formulas) plus the embedding on the
    first stage and the LM head on the last, which do not move. None when the widths are not known."""
    config = {k: int(fields[k]) for k in LAYER_FIELDS if k in fields}
    if "hidden_size" not in config or not config.get("num_hidden_layers"):
        return None
    layer_rows = parameter_estimate(config)  # no vocab_size: decoder layers only
    per_layer = (
        float(layer_rows.loc[layer_rows["component"] != "total", "parameters"].sum()) / config["num_hidden_layers"]
    )
    vocab = fields.get("vocab_size_or_lm_head_shard", 0.0) * config["hidden_size"]
    fixed = vocab * ((stage == 0) + (stage == stages - 1))
    held_before = fixed + before * per_layer
    return (fixed + after * per_layer) / held_before if held_before > 0 else None


def _per_stage(schedule: pd.DataFrame) -> pd.DataFrame:
    """Per stage over its ranks (every DP replica) and steps: mean compute, layer wall, bubble."""
    complete = schedule[schedule["complete"].astype(bool)]
    rows = complete if len(complete) else schedule
    return rows.groupby("stage").agg(
        compute_ms=("compute_ms", "mean"),
        layer_ms=("layer_ms", "mean"),
        layers=("layers_held", "median"),
        bubble_share=("bubble_share", "mean"),
        ranks=("rank_id", lambda r: sorted({int(x) for x in r})),
        steps=("step_ordinal", "nunique"),
    )


def _extra_work(operators: pd.DataFrame, heavy: list[int], light: list[int], steps: int) -> str:
    """What the heavy stage computes more of, per step: the operator types with the largest excess."""
    compute = operators[~operators["primary_category"].fillna("").str.startswith("communication")]
    per_type = compute.groupby(["rank_id", "type"])["total_cost_us"].sum().unstack(fill_value=0.0)
    mean_of = lambda ranks: per_type.reindex(ranks).mean().fillna(0.0)  # noqa: E731
    excess = ((mean_of(heavy) - mean_of(light)) / 1000.0 / max(steps, 1)).sort_values(ascending=False)
    top = excess[excess > 0].head(5)
    only = [t for t in top.index if mean_of(light).get(t, 0.0) == 0.0]
    parts = [f"{name} +{ms:.1f} ms" + (" (only there)" if name in only else "") for name, ms in top.items()]
    return ", ".join(parts) or "no operator type stands out"


def _best_move(heavy: pd.Series, light: pd.Series) -> tuple[int, float, float]:
    """Whole layers moved from the heavy to the light stage that minimise the slower of the two:
    (layers, heavy ms after, light ms after); (0, ...) when moving none is best."""
    moves = np.arange(0, max(int(heavy["layers"]), 1))
    after_heavy = heavy["compute_ms"] - moves * heavy["layer_ms"]
    after_light = light["compute_ms"] + moves * light["layer_ms"]
    best = int(np.argmin(np.maximum(after_heavy, after_light)))
    return int(moves[best]), float(after_heavy[best]), float(after_light[best])


@derived_input("micro_batch_size")
def micro_batch_size(ctx: RootContext) -> dict:
    """The micro-batch size where the kernels show it is 1 (size, and the shape that shows it): the hidden
    size's evidence (an RMS / LayerNorm input, tokens × hidden) is [seq, 1, hidden] or [1, seq, hidden].
    Empty where the shapes do not say (a larger batch's layout is ambiguous: which dim is the batch)."""
    path = ctx.out_dir / schema.MODEL_INFERRED_CONFIG_CSV.file
    if not path.exists():
        return {}
    table = csv_formulas.read_csv_view(path, usecols=["field", "value", "evidence_shapes"])
    row = table[table["field"] == "hidden_size"]
    if not len(row) or pd.isna(row["value"].iloc[0]) or pd.isna(row["evidence_shapes"].iloc[0]):
        return {}
    first = str(row["evidence_shapes"].iloc[0]).split("->")[0].split(";")[0].strip()
    dims = [int(d) for d in first.split(",") if d.strip().isdigit()]
    hidden = int(float(row["value"].iloc[0]))
    if len(dims) == 3 and dims[-1] == hidden and 1 in dims[:2] and max(dims[:2]) >= MIN_SEQUENCE:
        return {"size": 1, "shape": first}
    return {}


MIN_SEQUENCE = 64  # a leading dim this long beside a 1 is the sequence, the 1 the batch


@derived_input("layer_spans")
def layer_spans(ctx: RootContext) -> pd.DataFrame:
    """Every decoder layer span of every rank (layer_segments): rank_id, start_us (own clock), duration_us."""
    columns = ["rank_id", "start_us", "duration_us"]
    if not (ctx.out_dir / schema.LAYER_SEGMENTS).exists():
        return pd.DataFrame(columns=columns)
    spans = int_ranks(ctx.read_table(schema.LAYER_SEGMENTS, columns=["start_ns", "end_ns"]).to_pandas())
    return pd.DataFrame(
        {
            "rank_id": spans["rank_id"],
            "start_us": spans["start_ns"] / 1000.0,
            "duration_us": (spans["end_ns"] - spans["start_ns"]) / 1000.0,
        }
    )


@detector(
    finding_types=("pp_stage_imbalance", "pp_bubble_heavy"),
    reads={
        "pp_schedule": (),
        "operators": ("rank_id", "type", "primary_category", "total_cost_us"),
        "step_model": (),
        "layer_spans": (),
        "model_fields": (),
        "micro_batch_size": (),
        "alignment": ("alignment_id", "parallel_role"),
    },
)
def pp_findings(inputs: DiagnosisContext) -> list[Finding]:
    """The heavy stage of an uneven pipeline, and a pipeline whose schedule leaves it idle."""
    schedule = inputs.pp_schedule
    if schedule.empty:
        return []
    stages = _per_stage(schedule)
    findings = []
    imbalance = _stage_imbalance(inputs, stages, schedule)
    if imbalance is not None:
        findings.append(imbalance)
    # with the stages balanced, the slowest stage (which sets the bubble) computes less: "together" reads it
    balanced = (
        None if imbalance is None else max(imbalance.values["heavy_after_ms"], imbalance.values["light_after_ms"])
    )
    bubble = _bubble_heavy(schedule, stages, inputs.micro_batch_size, balanced)
    if bubble is not None:
        findings.append(bubble)
    return findings


def _stage_imbalance(inputs: DiagnosisContext, stages: pd.DataFrame, schedule: pd.DataFrame) -> Finding | None:
    spec = rule("pp_stage_imbalance")
    heavy, light = stages.loc[stages["compute_ms"].idxmax()], stages.loc[stages["compute_ms"].idxmin()]
    ratio = float(heavy["compute_ms"] / light["compute_ms"]) if light["compute_ms"] > 0 else math.inf
    if ratio < spec["compute_ratio_min"]:
        return None
    moved, heavy_after, light_after = _best_move(heavy, light)
    stages_count = int(schedule["stages"].max())
    held = {
        int(stage.name): _parameter_ratio(inputs.model_fields, int(stage.name), stages_count, stage["layers"], layers)
        for stage, layers in ((heavy, heavy["layers"] - moved), (light, light["layers"] + moved))
    }
    changes = {
        **_stage_change(heavy, heavy_after, held[int(heavy.name)]),
        **_stage_change(light, light_after, held[int(light.name)]),
    }
    price = priced(inputs.step_model, _replayed_move(inputs, changes))
    cited = schedule[schedule["rank_id"].isin([*heavy["ranks"][:2], *light["ranks"][:1]])][["rank_id", "step_ordinal"]]
    evidence = [step_evidence_id(int(r), int(o)) for r, o in cited.head(4).itertuples(index=False)]
    return Finding(
        finding_type="pp_stage_imbalance",
        scope="cross_rank",
        rank_ids=list(heavy["ranks"]),
        evidence_ids=evidence,
        statistic={"name": "stage_compute_ratio_max_min", "value": ratio, "threshold": spec["compute_ratio_min"]},
        values={
            "heavy": int(heavy.name),
            "light": int(light.name),
            "heavy_ranks": ("rank " if len(heavy["ranks"]) == 1 else "ranks ") + ", ".join(map(str, heavy["ranks"])),
            "heavy_ms": float(heavy["compute_ms"]),
            "light_ms": float(light["compute_ms"]),
            "ratio": ratio,
            "extra": _extra_work(inputs.operators, heavy["ranks"], light["ranks"], int(heavy["steps"])),
            "move": moved,
            "layers_moved": f"{moved} layer" + ("" if moved == 1 else "s"),
            "heavy_after_ms": heavy_after,
            "light_after_ms": light_after,
            "layer_ms": float(heavy["layer_ms"]),
            "saved_ms": price["recoverable_ms_per_step"],
            "shed_ms": float(heavy["compute_ms"]) - heavy_after,
            "taken_ms": light_after - float(light["compute_ms"]),
        },
        limitations=[
            "the move is whole layers between the heaviest and lightest stage; the replay places each "
            "stage's compute change where its decoder layers run and scales its gradient sync and "
            "optimizer with the parameters it holds (from the model fingerprint's widths)"
        ],
        **price,
    )


def _stage_change(stage: pd.Series, compute_after: float, parameters: float | None) -> dict[int, tuple]:
    """Each rank of ``stage``: its compute ms per step now and after the move, and the factor of the
    parameters it holds (None: not known)."""
    return {int(r): (float(stage["compute_ms"]), compute_after, parameters) for r in stage["ranks"]}


def _replayed_move(inputs: DiagnosisContext, changes: dict[int, tuple]) -> WhatIf:
    """The step with each rank's compute changed from before to after, as the replay takes it: the change
    lands where the rank's decoder layers run, in proportion to each layer span (a layer's forward in
    each forward stretch, its backward in each backward one; the LM head, loss and embedding stay), and
    the parameters move with the layers — the stage's gradient sync (its DP collectives) and its
    optimizer (the work after its last collective) scale with the parameters it holds. Where the sync's
    buckets overlap the backward, the moved layers' gradients fill buckets under the backward (a bucket
    holds its layers' gradients, up to the framework's bucket size) and the exposed last one, the
    stage's first layers', keeps its time; a sync after the whole backward scales whole."""
    model = inputs.step_model
    spans = inputs.layer_spans
    steps = model.slots.groupby("rank_id").size()
    per_step = spans.groupby("rank_id")["duration_us"].sum() / steps.reindex(spans["rank_id"].unique()).to_numpy()
    # the share of each layer span the move takes away (above 0) or adds (below 0)
    share = {
        rank: (before - after) * 1000.0 / per_step[rank]
        for rank, (before, after, _) in changes.items()
        if per_step.get(rank, 0) > 0
    }
    moved = spans[spans["rank_id"].isin(list(share))]
    windows = moved.assign(duration_us=moved["duration_us"] * moved["rank_id"].map(share))
    change = close_windows(model, windows[["rank_id", "start_us", "duration_us"]])
    parameters = {rank: ratio for rank, (_, _, ratio) in changes.items() if ratio is not None}
    held = scaled_work(model, {}, tail_factors=parameters)
    change.tail_cut_us = change.tail_cut_us + held.tail_cut_us
    alignment = inputs.alignment
    if parameters and len(model.rows) and "parallel_role" in alignment.columns:
        dp = set(alignment.loc[alignment["parallel_role"] == "DP", "alignment_id"])
        rows = model.rows[model.rows["alignment_id"].isin(dp)]
        overlapped = rows.groupby("slot")["floating"].transform("any")
        rows = rows[rows["floating"] | ~overlapped]
        by_instance = rows["rank_id"].map(parameters).groupby(rows["alignment_id"]).mean().dropna()
        change.transit_us = scaled_transit(model, by_instance).transit_us
    return change


def _bubble_heavy(
    schedule: pd.DataFrame, stages: pd.DataFrame, batch: dict, balanced_ms: float | None = None
) -> Finding | None:
    """The pipeline's bubble beyond what its schedule should leave, priced analytically by the feasible
    remedy (more micro-batches of the same global batch, or virtual stages where a micro-batch holds one
    sample); ``balanced_ms``: the slowest stage's compute once an imbalance finding's move is made (the
    bubble both findings' fixes together leave is the balanced pipeline's: ``recoverable_with``)."""
    spec = rule("pp_bubble_heavy")
    p, m = int(schedule["stages"].max()), int(schedule["micro_batches"].median())
    ideal, measured = (p - 1) / (m + p - 1), float(stages["bubble_share"].mean())
    target = float(spec["ideal_share_max"])
    if ideal < target:  # a bubble beyond the schedule's own is another finding's (stage imbalance, idle)
        return None
    # the smallest micro-batch count whose ideal bubble is under the rules' bound
    suggested = max(int(math.floor((p - 1) * (1 - target) / target)) + 1, m)
    compute = float(stages["compute_ms"].max())  # the slowest stage sets the pipeline's pace
    worst = schedule.sort_values("bubble_share", ascending=False).iloc[0]
    values = {
        "stages": p,
        "micro_batches": m,
        "measured": measured,
        "ideal": ideal,
        "suggested": suggested,
        "suggested_ideal": (p - 1) / (suggested + p - 1),
        "schedule": str(worst["schedule"]),
    }
    layers = int(stages["layers"].min())
    virtual = int(spec["virtual_stages"])
    if batch.get("size") == 1 and layers >= virtual:
        # analytic: the schedule's bubble C (p - 1) / m shrinks by the interleave to C (p - 1) / (v m)
        factor = (p - 1) / m * (1 - 1 / virtual)
        values |= {
            "batch_shape": f"{batch['shape']}: micro-batch size 1",
            "virtual": virtual,
            "per_virtual": layers // virtual,
            "virtual_ideal": (p - 1) / (virtual * m + p - 1),
        }
        remedy, how = spec["remedy_virtual"], f"{virtual} virtual pipeline stages per rank"
    else:  # analytic: the same work in more, smaller micro-batches: C (m + p - 1) / m per step
        factor = (p - 1) * (1 / m - 1 / suggested)
        remedy, how = spec["remedy_micro_batches"], "more micro-batches"
    saved = compute * factor
    if balanced_ms is not None:  # what it saves beside the stage move (the two fixes share the bubble)
        values["recoverable_with"] = {"pp_stage_imbalance": round(balanced_ms * factor, 3)}
    values["remedy"] = " ".join(remedy.format(**values).split())
    return Finding(
        finding_type="pp_bubble_heavy",
        scope="cross_rank",
        rank_ids=sorted({int(r) for r in schedule["rank_id"]}),
        evidence_ids=[step_evidence_id(int(worst["rank_id"]), int(worst["step_ordinal"]))],
        statistic={"name": "pipeline_bubble_share", "value": measured, "threshold": target},
        values=values,
        limitations=[f"time saved with {how} is analytic (the schedule's bubble of the same work), not replayed"],
        recoverable_ms_per_step=saved,
    )
