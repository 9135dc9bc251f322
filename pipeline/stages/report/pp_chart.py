"""The pipeline-parallel schedule as a chart: per stage, the F / B passes of each micro-batch of one
step, on the common clock. Read from the passes segment found (``pass_spans``) and the stage of each
rank (pp_schedule.csv); empty without pipeline parallelism."""

from __future__ import annotations

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


def pp_chart(passes: pd.DataFrame, schedule: pd.DataFrame, offsets_ns: dict[int, float], base_ns: int) -> dict:
    """The chart of one step (the first complete step every PP rank captured): one row per rank in
    stage order with its passes [label, start µs, end µs] from the step's first pass, its schedule
    text and bubble share; {} without pipeline parallelism."""
    if passes.empty:
        return {}
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
            }
        )
    return {"step_id": step_id, "span_us": float(step["end_us"].max()), "rows": rows}
