"""The pipeline-parallel schedule as a chart: per stage, the F / B passes of each micro-batch of one
step, and the compute outside them (the LM head and loss, the embedding, the optimizer: a stage that
looks idle between its passes may be computing), on the common clock. Read from the passes segment
found (``pass_spans``), the device's kernels and the stage of each rank (pp_schedule.csv); empty
without pipeline parallelism."""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof.pipeline.stages.report.perfetto import rebased_us
from npuprof.pipeline.summaries.pp_schedule import pass_spans


def stage_passes(layers: pd.DataFrame, schedule: pd.DataFrame) -> pd.DataFrame:
    """Every pass of every PP rank: rank_id, stage, step_ordinal, step_id, label, direction, start_ns,
    end_ns (empty without a schedule)."""
    if layers.empty or schedule.empty:
        return pd.DataFrame(columns=["rank_id", "stage", "step_ordinal", "step_id", "label", "direction"])
    keys = ["rank_id", "step_ordinal"]
    stages = schedule[[*keys, "stage", "step_id", "complete"]].astype({"rank_id": int, "step_ordinal": int})
    passes = pass_spans(layers.astype({"rank_id": int, "step_ordinal": int}))
    return passes.merge(stages, on=keys)


MERGE_GAP_US = 500.0  # kernels outside the passes closer than this are one stretch of compute
MIN_STRETCH_SHARE = 0.01  # of the step's span: shorter stretches are not drawn


def outside_passes(events: pd.DataFrame, own: pd.DataFrame, zero: float, offsets_ns: dict, base_ns: int) -> list:
    """One rank's compute outside its passes in the chart's step (``own``: its passes with start_us /
    end_us from the chart's zero): [start µs, end µs, busy ms] per stretch of kernels no more than
    MERGE_GAP_US apart, between the step's first and last pass, of at least MIN_STRETCH_SHARE of it."""
    rank = int(own["rank_id"].iloc[0])
    mine = events[(events["rank_id"] == rank) & (events["op_type"] != "communication")] if len(events) else events
    if not len(mine):
        return []
    start = rebased_us(mine["start_ns"], mine["rank_id"], offsets_ns, base_ns) - zero
    end = rebased_us(mine["end_ns"], mine["rank_id"], offsets_ns, base_ns) - zero
    first, last = float(own["start_us"].min()), float(own["end_us"].max())
    spans = own.sort_values("start_us")
    slot = np.searchsorted(spans["start_us"].to_numpy(float), start, side="right") - 1
    inside = (slot >= 0) & (start < spans["end_us"].to_numpy(float)[np.clip(slot, 0, None)])
    keep = ~inside & (start >= first) & (end <= last)
    start, end = start[keep], end[keep]
    if not len(start):
        return []
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    reach = np.maximum.accumulate(end)
    stretch = np.concatenate(([0], np.cumsum(start[1:] > reach[:-1] + MERGE_GAP_US)))
    grouped = pd.DataFrame({"stretch": stretch, "start": start, "end": end, "busy": end - start}).groupby("stretch")
    table = grouped.agg(start=("start", "min"), end=("end", "max"), busy=("busy", "sum"))
    table = table[table["end"] - table["start"] >= MIN_STRETCH_SHARE * (last - first)]
    return [[round(a, 3), round(b, 3), round(c / 1000.0, 3)] for a, b, c in table.itertuples(index=False)]


def pp_chart(
    passes: pd.DataFrame,
    schedule: pd.DataFrame,
    offsets_ns: dict[int, float],
    base_ns: int,
    events: pd.DataFrame | None = None,
) -> dict:
    """The chart of one step (the first complete step every PP rank captured): one row per rank in
    stage order with its passes [label, start µs, end µs] from the step's first pass, its compute
    outside them (``outside_passes``, from ``events``), its schedule text and bubble share; {} without
    pipeline parallelism."""
    if passes.empty:
        return {}
    kernels = events if events is not None else pd.DataFrame()
    complete = passes[passes["complete"].astype(bool)]
    pool = complete if len(complete) else passes
    ranks = passes["rank_id"].nunique()
    shared = pool.groupby("step_id")["rank_id"].nunique()
    step_ids = shared[shared == ranks].index
    step_id = int(step_ids.min()) if len(step_ids) else int(pool["step_id"].min())
    step = passes[passes["step_id"] == step_id]
    start = rebased_us(step["start_ns"], step["rank_id"], offsets_ns, base_ns)
    end = rebased_us(step["end_ns"], step["rank_id"], offsets_ns, base_ns)
    zero = float(start.min())
    step = step.assign(start_us=(start - zero).round(3), end_us=(end - zero).round(3))
    plan = schedule.astype({"rank_id": int}).set_index(["rank_id", "step_id"])
    rows = []
    for (stage, rank), own in step.groupby(["stage", "rank_id"], sort=True):  # a loop over PP ranks
        facts = plan.loc[(int(rank), step_id)] if (int(rank), step_id) in plan.index else None
        rows.append(
            {
                "rank": int(rank),
                "stage": int(stage),
                "schedule": None if facts is None else str(facts["schedule"]),
                "bubble_share": None if facts is None else round(float(facts["bubble_share"]), 4),
                "ideal_bubble_share": None if facts is None else round(float(facts["ideal_bubble_share"]), 4),
                "passes": [[str(r.label), float(r.start_us), float(r.end_us)] for r in own.itertuples()],
                "other": outside_passes(kernels, own, zero, offsets_ns, base_ns),
            }
        )
    return {"step_id": step_id, "span_us": float(step["end_us"].max()), "rows": rows}
