"""Capture health: steps that are not what the findings assume, named instead of priced as if they were.

An idle capture (the device busy a sliver of a "step" that runs a handful of kernels: a fragment, or the
profiler started around nothing) makes every idle finding huge and meaningless; a warm-up step (a
one-time parameter broadcast at start-up) holds time no steady-state step spends. Both are told in the
findings document, the report and the terminal, and findings on an idle capture's ranks are at most low
confidence — the capture cannot say what a real step of the workload costs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof import knowledge
from npuprof.pipeline.schema import AFTER_PREVIOUS_FORWARD

STEP_READS = ("rank_id", "step_ordinal", "step_id", "wall_ms", "busy_ms", "event_count")
COMM_READS = ("rank_id", "step_ordinal", "kind", "duration_us")
LOW = "low"


def _rules() -> dict:
    return knowledge.load("diagnosis_rules")["capture_health"]


def _words(kind: str, **values) -> str:
    return " ".join(_rules()["text"][kind].format(**values).split())


def idle_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """The rank-steps whose device is busy under ``busy_share_max`` of the wall, or that run fewer than
    ``kernels_min`` kernels (rank_id, step_ordinal, step_id, wall_ms, busy_ms, event_count, busy_share).
    A serving forward's wall is taken without the idle before it (its head since the previous forward):
    that is the host's turn between forwards, which serving_host_gap judges, not a fragment's idle."""
    rules = _rules()["idle_capture"]
    if not len(steps) or not {"busy_ms", "event_count"} <= set(steps.columns):
        return pd.DataFrame(columns=[*STEP_READS, "busy_share"])
    wall = steps["wall_ms"]
    if {"head_ms", "start_source"} <= set(steps.columns):
        between = (steps["start_source"] == AFTER_PREVIOUS_FORWARD).to_numpy()
        wall = wall - np.where(between, steps["head_ms"].fillna(0.0).to_numpy(float), 0.0)
    wall = wall.where(wall > 0)
    frame = steps.assign(busy_share=(steps["busy_ms"] / wall).fillna(0.0))
    idle = (frame["busy_share"] < rules["busy_share_max"]) | (frame["event_count"] < rules["kernels_min"])
    return frame[idle].reset_index(drop=True)


def warmup_steps(steps: pd.DataFrame, comm: pd.DataFrame) -> pd.DataFrame:
    """The steps whose one-time collectives (``one_time_kinds``) hold at least ``share_min`` of some rank's
    wall (step_id, step_ordinal, ranks, kinds, one_time_ms, wall_ms, share: the rank it is largest on)."""
    rules = _rules()["warmup_step"]
    columns = ["step_id", "step_ordinal", "ranks", "kinds", "one_time_ms", "wall_ms", "share"]
    if not len(comm) or not len(steps):
        return pd.DataFrame(columns=columns)
    once = comm[comm["kind"].isin(rules["one_time_kinds"]) & comm["step_ordinal"].notna()]
    if not len(once):
        return pd.DataFrame(columns=columns)
    once = once.assign(step_ordinal=once["step_ordinal"].astype("int64"))
    per_rank = once.groupby(["rank_id", "step_ordinal"]).agg(
        one_time_ms=("duration_us", lambda d: float(d.sum()) / 1000.0), kinds=("kind", lambda k: sorted(set(k)))
    )
    per_rank = per_rank.reset_index().merge(steps[["rank_id", "step_ordinal", "step_id", "wall_ms"]], how="inner")
    per_rank["share"] = per_rank["one_time_ms"] / per_rank["wall_ms"].where(per_rank["wall_ms"] > 0)
    heavy = per_rank[per_rank["share"] >= rules["share_min"]]
    rows = []
    for ordinal, group in heavy.groupby("step_ordinal"):  # a loop over the few warm-up steps
        top = group.sort_values("share").iloc[-1]
        kinds = sorted({k for ks in group["kinds"] for k in ks})
        rows.append(
            (
                top["step_id"],
                ordinal,
                sorted(int(r) for r in group["rank_id"]),
                kinds,
                *top[["one_time_ms", "wall_ms", "share"]],
            )
        )
    return pd.DataFrame(rows, columns=columns)


def capture_health(steps: pd.DataFrame, comm: pd.DataFrame) -> list[dict]:
    """What is wrong with the capture itself: each idle capture's ranks and steps, each warm-up step
    (kind, ranks, step ids, the numbers and the sentence)."""
    health = []
    idle = idle_steps(steps)
    if len(idle):  # one item per set of ranks, naming every step it holds (a long capture has many)
        ranks_of = idle.groupby("step_ordinal")["rank_id"].agg(lambda r: tuple(sorted(int(x) for x in r)))
        idle = idle.assign(ranks=idle["step_ordinal"].map(ranks_of))
    for ranks, group in idle.groupby("ranks", sort=False) if len(idle) else []:  # a few rank sets
        top = group.sort_values("busy_share").iloc[0]
        named = group.drop_duplicates("step_ordinal").sort_values("step_ordinal")
        values = {
            "ranks": ", ".join(map(str, ranks)),
            "step": ", ".join(_step_name(i, o) for i, o in zip(named["step_id"], named["step_ordinal"])),
            "busy_ms": float(top["busy_ms"]),
            "wall_ms": float(top["wall_ms"]),
            "busy_share": float(top["busy_share"]),
            "kernels": int(top["event_count"]),
        }
        health.append(
            {
                "kind": "idle_capture",
                "rank_ids": list(ranks),
                "step_ordinal": int(named["step_ordinal"].iloc[0]),
                **_plain(values),
                "text": _words("idle_capture", **values),
            }
        )
    for row in warmup_steps(steps, comm).itertuples(index=False):
        values = {
            "ranks": ", ".join(map(str, row.ranks)),
            "step": _step_name(row.step_id, row.step_ordinal),
            "kinds": ", ".join(row.kinds),
            "one_time_ms": float(row.one_time_ms),
            "wall_ms": float(row.wall_ms),
            "share": float(row.share),
        }
        health.append(
            {
                "kind": "warmup_step",
                "rank_ids": list(row.ranks),
                "step_ordinal": int(row.step_ordinal),
                **_plain(values),
                "text": _words("warmup_step", **values),
            }
        )
    return health


def _step_name(step_id: object, ordinal: int) -> str:
    """A step as the capture numbers it (its id), else by its ordinal."""
    return str(int(step_id)) if pd.notna(step_id) else f"#{int(ordinal)}"


def _plain(values: dict) -> dict:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in values.items()}


def lower_confidence(findings: list[dict], health: list[dict]) -> None:
    """Findings on the ranks of an idle capture are at most low confidence, and say why."""
    idle_ranks = {r for item in health if item["kind"] == "idle_capture" for r in item["rank_ids"]}
    if not idle_ranks:
        return
    for finding in findings:
        if set(finding["rank_ids"]) & idle_ranks:
            finding["confidence"] = LOW
            finding["limitations"].append(
                "the capture is mostly idle on these ranks (capture health: idle_capture): what it shows is "
                "not a step of the workload, so this finding is low confidence"
            )
