"""sdma_misaligned: a collective's SDMA copies whose size is not a multiple of 512 bytes move slower than
the aligned copies of the same kind beside them, and the step waits for the difference.

HCCL splits a collective's buffer into slices, one data move (Memcpy, Reduce_Inline) per slice on its own
plane; a buffer whose bytes do not divide into 512-byte multiples leaves a slice misaligned, and the DMA
engine moves such a slice in smaller bursts. The vendor's advisor flags every op with a misaligned SDMA
move over a chip-to-chip link (size above 512 bytes); npuprof measures what the misalignment costs: each
misaligned move's rate against the median rate of its aligned siblings — the same op's other slices on the
same rank, of the same task type and link, within a factor of two of its size — and prices moving it at
that rate.

An op ends when its slowest plane does: per instance, each plane's data moves are summed, the misaligned
ones at the aligned rate, and the op's transit is shortened by what its busiest plane (over its members)
gives up. Priced by the replay with those transits; a slowdown the step hides costs nothing.
"""

from __future__ import annotations

import pandas as pd

from npuprof.pipeline import schema
from npuprof.pipeline.io import int_ranks
from npuprof.pipeline.stages.base import RootContext
from npuprof.pipeline.stages.diagnostics.collective_sizes import FAMILY, INSTANCE_COLUMNS, size_words
from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, evidence_cap, priced, rule
from npuprof.pipeline.stages.diagnostics.registry import derived_input, detector
from npuprof.pipeline.stages.diagnostics.retiming import scaled_transit
from npuprof.pipeline.stages.diagnostics.step_scale import mean_step_wall_ms

FINDING = "sdma_misaligned"
TASK_COLUMNS = ["rank_id", "step_ordinal", "start_ns", "duration_us", "task_type", "plane", "transport", "link_type"]
SIBLINGS = ["rank_id", "alignment_id", "task_type", "link_type"]  # what a misaligned move is compared with


@derived_input("data_moves")
def data_moves(ctx: RootContext) -> pd.DataFrame:
    """HCCL's data moves inside the ranks' steps (evidence's hccl_tasks), with their rank; None where no
    rank's capture holds them (no trace_view.json's HCCL lanes, no COMMUNICATION_TASK_INFO, or the host
    trace was not read)."""
    if not (ctx.out_dir / schema.HCCL_TASKS.path).exists():
        return None
    tasks = int_ranks(ctx.read_table(schema.HCCL_TASKS, columns=[*TASK_COLUMNS, "bytes"]).to_pandas())
    return tasks if len(tasks) else None


def sdma_moves(tasks: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """The SDMA data moves the check reads (between chips, above ``min_bytes``), with ``misaligned`` and
    their rate (bytes per µs)."""
    moves = tasks[
        (tasks["transport"] == "SDMA")
        & ~tasks["link_type"].isin(spec["skip_links"])
        & (tasks["bytes"] > spec["min_bytes"])
        & (tasks["duration_us"] > 0)
    ]
    return moves.assign(
        misaligned=(moves["bytes"] % spec["alignment_bytes"]) != 0,
        rate=moves["bytes"] / moves["duration_us"],
    )


def with_aligned_rates(moves: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """The misaligned moves (placed in their instances) with ``aligned_rate``: the median rate of their
    aligned siblings — the same rank's moves of the same instance, task type and link, within a factor of
    two of their size (at least ``min_aligned`` of them; a move without is dropped: nothing to compare
    with). Siblings are the fair yardstick: the same op's other slices over the same link at the same time."""
    slow = moves[moves["misaligned"]].reset_index(drop=True).rename_axis("move").reset_index()
    aligned = moves.loc[~moves["misaligned"], [*SIBLINGS, "bytes", "rate"]]
    pairs = slow[["move", *SIBLINGS, "bytes"]].merge(aligned, on=SIBLINGS, suffixes=("", "_aligned"))
    ratio = pairs["bytes_aligned"] / pairs["bytes"]
    pairs = pairs[(ratio >= 0.5) & (ratio <= 2.0)].groupby("move")["rate"]
    reference = pd.DataFrame({"aligned_rate": pairs.median(), "aligned_count": pairs.size()})
    reference = reference[reference["aligned_count"] >= spec["min_aligned"]]
    return slow.merge(reference, left_on="move", right_index=True).drop(columns="move")


def of_instances(moves: pd.DataFrame, alignment: pd.DataFrame) -> pd.DataFrame:
    """``moves`` with the collective instance each ran in (its rank's instance whose span holds its start:
    alignment_id and the instance columns); moves outside every instance are dropped."""
    instances = alignment[list(INSTANCE_COLUMNS)].assign(start_ns=(alignment["start_us"] * 1000).round())
    instances = instances.astype({"start_ns": "int64"}).sort_values("start_ns")
    placed = pd.merge_asof(moves.sort_values("start_ns"), instances, on="start_ns", by="rank_id", direction="backward")
    return placed[placed["start_ns"] <= placed["end_us"] * 1000 + 1].dropna(subset=["alignment_id"])


def instance_savings(moves: pd.DataFrame, slow: pd.DataFrame) -> pd.Series:
    """Per instance (alignment_id): the µs its busiest plane over its members gives up when the ``slow``
    moves run at their aligned rate. ``moves``: every placed data move; ``slow``: the misaligned ones, with
    ``saving_us``."""
    keys = ["alignment_id", "rank_id", "plane"]
    busy = moves.groupby(keys)["duration_us"].sum()
    cut = slow.groupby(keys)["saving_us"].sum().reindex(busy.index, fill_value=0.0)
    before = busy.groupby("alignment_id").max()
    after = (busy - cut).groupby("alignment_id").max()
    return (before - after).clip(lower=0.0)


@detector(
    finding_types=(FINDING,),
    reads={
        "data_moves": (),
        "alignment": (*INSTANCE_COLUMNS, "duration_us"),
        "steps": ("rank_id", "step_ordinal", "complete", "wall_ms"),
        "step_model": (),
    },
)
def sdma_misaligned(inputs: DiagnosisContext) -> list[Finding]:
    """One finding per role and kind whose misaligned SDMA moves run at most ``rate_ratio_max`` of the
    aligned moves' rate and cost the step at least ``share_min`` of it."""
    spec = rule(FINDING)
    alignment, tasks = inputs.alignment, inputs.data_moves
    if not len(alignment):
        return []
    if tasks is None:
        inputs.not_judging(FINDING, spec["not_judged"])
        return []
    moves = of_instances(sdma_moves(tasks, spec), alignment[alignment["member_count"] >= 2])
    if not len(moves):
        return []
    slow = with_aligned_rates(moves, spec)
    slow = slow.assign(saving_us=(slow["duration_us"] - slow["bytes"] / slow["aligned_rate"]).clip(lower=0.0))
    slow["parallel_role"] = slow["parallel_role"].fillna("unknown").astype(str)
    wall_ms = mean_step_wall_ms(inputs.steps) if len(inputs.steps) else 0.0
    transit = alignment.groupby("alignment_id")["transit_us"].median()  # each instance's, over its members
    findings = []
    for (role, kind), family in slow.groupby(FAMILY):  # a loop over the roles and kinds with misaligned moves
        ratio = float((family["rate"] / family["aligned_rate"]).median())
        if ratio > spec["rate_ratio_max"]:
            continue
        placed = moves[moves["alignment_id"].isin(family["alignment_id"])]
        savings = instance_savings(placed, family)
        op_transit = transit.reindex(savings.index)
        factors = (1.0 - savings / op_transit.where(op_transit > 0)).clip(lower=0.0).dropna()
        claim = priced(inputs.step_model, scaled_transit(inputs.step_model, factors))
        if wall_ms and claim["recoverable_ms_per_step"] >= spec["share_min"] * wall_ms:
            findings.append(_finding(family, savings, role, kind, ratio, claim, spec))
    return findings


def _finding(
    family: pd.DataFrame,
    savings: pd.Series,
    role: str,
    kind: str,
    ratio: float,
    claim: dict,
    spec: dict,
) -> Finding:
    ranks = sorted(int(r) for r in family["rank_id"].unique())
    ops = family.drop_duplicates(["rank_id", "alignment_id"])
    order = ops.assign(saving=ops["alignment_id"].map(savings)).sort_values("saving", ascending=False)
    per_step = ops.groupby(["rank_id", "step_id"]).size()
    offsets = sorted({int(b) % spec["alignment_bytes"] for b in family["bytes"]})
    return Finding(
        finding_type=FINDING,
        scope="rank",
        rank_ids=ranks,
        evidence_ids=order["evidence_id"].head(evidence_cap()).tolist(),
        statistic={"name": "misaligned SDMA rate over aligned", "value": ratio, "threshold": spec["rate_ratio_max"]},
        values={
            "ranks": ", ".join(map(str, ranks)),
            "role": role,
            "kind": kind,
            "ops_per_step": float(per_step.mean()),
            "size": size_words(float(family["bytes"].median()) / 1e6),
            "offsets": ", ".join(f"{o} B" for o in offsets),
            "rate": ratio,
            "misaligned_gbps": float(family["rate"].median()) / 1e3,  # bytes per µs → GB/s
            "aligned_gbps": float(family["aligned_rate"].median()) / 1e3,
            "ms_per_step": claim["recoverable_ms_per_step"],
        },
        limitations=[
            "the aligned rate is measured on this capture's aligned moves of the same task type, link and size; "
            "padding the buffer moves a few bytes more, which is not counted",
        ],
        **claim,
    )
