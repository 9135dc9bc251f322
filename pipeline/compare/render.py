"""compare_summary.json (agent-first, ≤ 20 KB) and compare.md from the comparison tables."""

from __future__ import annotations

import json

import pandas as pd

from npuprof import knowledge
from npuprof.pipeline import __version__, io, schema
from npuprof.pipeline.compare.sides import Side
from npuprof.pipeline.mdtext import cell, table

# where each table's rows come from, for the gains / regressions list
SOURCES = {
    schema.COMPARE_STEP_CLASSES: ("step_class", ["step_class_id"]),
    schema.COMPARE_LAYER_CLASSES: ("layer_class", ["layer_class_id", "layer_role"]),
    schema.COMPARE_BLOCK_CLASSES: ("block_class", ["block_class_id", "block_kind", "layer_role"]),
    schema.COMPARE_OPERATORS: ("operator", ["name", "type", "input_shapes"]),
    schema.COMPARE_COMMUNICATION: ("collective", ["kind", "parallel_role", "part"]),
}
TITLES = {
    "step_class": "Step classes",
    "layer_class": "Layer classes",
    "block_class": "Block classes",
    "operator": "Operators",
    "collective": "Collectives",
}
LIMITATIONS = [
    "steps, layers and blocks are matched by class id (the same kernels and shapes); a class whose "
    "shapes changed is listed on one side only",
    "operators are matched by name and shapes, collectives by kind and parallel role",
]


def _step_delta(overview: pd.DataFrame) -> tuple[float, float, float]:
    wall = overview[(overview["rank_id"] == "all") & (overview["component"] == "wall_ms")]
    if wall.empty:
        return 0.0, 0.0, 0.0
    row = wall.iloc[0]
    return float(row["base_ms_per_step"]), float(row["new_ms_per_step"]), float(row["delta_ms"])


def _moves(tables: dict[str, pd.DataFrame], step_delta: float) -> list[dict]:
    """Every significant change of every table, with its share of the step's wall delta."""
    moves = []
    for name, (level, label_columns) in SOURCES.items():
        frame = tables[name]
        if frame.empty:
            continue
        changed = frame[frame["status"] == "changed"]
        for _, row in changed.iterrows():
            moves.append(
                {
                    "level": level,
                    "what": {c: row[c] for c in label_columns if c in row and pd.notna(row[c])},
                    "per_step_delta_ms": round(float(row["per_step_delta_ms"]), 4),
                    "share_of_step_delta": round(float(row["per_step_delta_ms"]) / step_delta, 4)
                    if step_delta
                    else None,
                    "median_ratio": None if pd.isna(row["median_ratio"]) else round(float(row["median_ratio"]), 4),
                    "p_value": None if pd.isna(row["p_value"]) else float(row["p_value"]),
                    "evidence": {"baseline": row["base_evidence"], "new": row["new_evidence"]},
                    "table": name,
                }
            )
    return sorted(moves, key=lambda m: abs(m["per_step_delta_ms"]), reverse=True)


def per_rank_moves(overview: pd.DataFrame) -> list[dict]:
    """Per rank: how its step wall, compute, exposed communication and idle moved (ms per step), the
    rank whose compute moved most first — a slowdown on one rank of many, hidden in all-rank medians."""
    ranks = overview[(overview["rank_id"] != "all") & overview["breakdown"].isin(["step", "primary"])]
    if ranks.empty:
        return []
    moved = ranks.pivot_table(index="rank_id", columns="category", values="delta_ms", aggfunc="sum").fillna(0.0)
    moved = moved.reindex(columns=["wall", "compute", "communication", "idle"], fill_value=0.0)
    order = moved["compute"].abs().sort_values(ascending=False, kind="stable").index
    return [
        {
            "rank": str(rank),
            "wall_delta_ms": round(float(moved.loc[rank, "wall"]), 4),
            "compute_delta_ms": round(float(moved.loc[rank, "compute"]), 4),
            "communication_delta_ms": round(float(moved.loc[rank, "communication"]), 4),
            "idle_delta_ms": round(float(moved.loc[rank, "idle"]), 4),
        }
        for rank in order
    ]


MIN_TESTED_STEPS = 2  # a side with fewer complete steps has no spread to test a step-level change against


def _verdict(moves: list[dict], delta: float, shape: dict, steps: tuple[int, int]) -> str:
    """faster / slower / no significant change, "not comparable: why" when the steps differ in structure,
    or "not testable: why" when nothing moved significantly but a side has too few steps to say so."""
    if shape.get("not_comparable"):
        return "not comparable: " + "; ".join(shape["not_comparable"])
    if moves:
        return "faster" if delta < 0 else "slower"
    if min(steps) < MIN_TESTED_STEPS:
        return (
            f"not testable: {steps[0]} complete step(s) in the baseline and {steps[1]} in the new capture; "
            f"the step wall moved {delta:+.3g} ms, which no test can tell from noise"
        )
    return "no significant change"


def _distinct_steps(side: Side) -> int:
    """How many complete steps a side holds (its ranks' steps counted once)."""
    key = "step_id" if "step_id" in side.steps and side.steps["step_id"].notna().all() else "step_ordinal"
    return int(side.steps[key].nunique()) if len(side.steps) else 0


def compare_summary(base: Side, new: Side, tables: dict[str, pd.DataFrame], changes: dict, shape: dict) -> dict:
    """The comparison in brief: step delta, top gains and regressions, findings moves, limitations."""
    rules = knowledge.load("compare_rules")
    before, after, delta = _step_delta(tables[schema.COMPARE_OVERVIEW])
    moves = _moves(tables, delta)
    structural = {
        name: int((tables[name]["status"].isin(["only_in_baseline", "only_in_new"])).sum())
        for name in SOURCES
        if not tables[name].empty
    }
    document = {
        "schema_version": 1,
        "tool": "npuprof",
        "tool_version": __version__,
        "generated_at": io.utc_now(),
        "baseline": str(base.out_dir),
        "new": str(new.out_dir),
        "structure": shape,
        "headline": {
            "step_wall_ms": {"baseline": round(before, 4), "new": round(after, 4), "delta": round(delta, 4)},
            "significant_changes": len(moves),
            "verdict": _verdict(moves, delta, shape, (_distinct_steps(base), _distinct_steps(new))),
        },
        "test": f"two-sided Mann-Whitney U on per-instance times, p < {rules['alpha']}, and the median moved "
        f"beyond 1.4826 × MAD of both sides and {rules['min_relative_change']:.0%} of the baseline",
        "top_gains": [m for m in moves if m["per_step_delta_ms"] < 0][: rules["summary_top"]],
        "top_regressions": [m for m in moves if m["per_step_delta_ms"] > 0][: rules["summary_top"]],
        "per_rank": per_rank_moves(tables[schema.COMPARE_OVERVIEW])[: rules["summary_top"]],
        "findings": {k: (v if isinstance(v, int) else v[:5]) for k, v in changes.items()},
        "only_on_one_side": structural,
        "limitations": LIMITATIONS + shape["notes"],
    }
    while len(json.dumps(document, default=str)) > rules["summary_max_bytes"] and (
        document["top_gains"] or document["top_regressions"]
    ):
        longer = "top_gains" if len(document["top_gains"]) >= len(document["top_regressions"]) else "top_regressions"
        document[longer].pop()
    return document


def _moves_table(moves: list[dict]) -> str:
    if not moves:
        return "_none_\n"
    frame = pd.DataFrame(
        [
            {
                "level": m["level"],
                "what": " ".join(str(v) for v in m["what"].values()),
                "per_step_delta_ms": m["per_step_delta_ms"],
                "share_of_step_delta": m["share_of_step_delta"],
                "median_ratio": m["median_ratio"],
                "p_value": m["p_value"],
                "baseline_evidence": m["evidence"]["baseline"],
                "new_evidence": m["evidence"]["new"],
            }
            for m in moves
        ]
    )
    return table(frame, list(frame.columns), 20)


def compare_markdown(summary: dict, tables: dict[str, pd.DataFrame]) -> str:
    """compare.md: verdict, gains, regressions, overview, per-table tops, findings moves, limitations."""
    head = summary["headline"]
    wall = head["step_wall_ms"]
    parts = [
        f"# npuprof compare\n\nBaseline `{cell(summary['baseline'])}` → new `{cell(summary['new'])}`.\n",
        f"**{cell(head['verdict'])}**: step wall {cell(wall['baseline'])} → {cell(wall['new'])} ms "
        f"({cell(wall['delta'])} ms per step); {head['significant_changes']} significant changes "
        f"({cell(summary['test'])}).\n",
        "## Top gains\n\n" + _moves_table(summary["top_gains"]),
        "## Top regressions\n\n" + _moves_table(summary["top_regressions"]),
    ]
    overview = tables[schema.COMPARE_OVERVIEW]
    overall = overview[(overview["rank_id"] == "all") & (overview["breakdown"].isin(["step", "primary"]))]
    parts.append(
        "## Where the step's time goes (all ranks, ms per step)\n\n"
        + table(overall, ["category", "component", "base_ms_per_step", "new_ms_per_step", "delta_ms", "ratio"], 40)
    )
    if summary.get("per_rank"):
        parts.append(
            "## Per rank (ms per step; the rank whose compute moved most first)\n\n"
            + table(pd.DataFrame(summary["per_rank"]), list(summary["per_rank"][0]), 16)
        )
    for name, (level, labels) in SOURCES.items():
        frame = tables[name]
        parts.append(
            f"## {TITLES[level]} (`{name}`)\n\n"
            + table(
                frame,
                [
                    *labels,
                    "status",
                    "base_per_step_ms",
                    "new_per_step_ms",
                    "per_step_delta_ms",
                    "median_ratio",
                    "p_value",
                ],
                10,
            )
        )
    findings = summary["findings"]
    parts.append(
        "## Findings\n\n"
        + "".join(f"- appeared: {cell(f['finding_type'])} — {cell(f['summary'])}\n" for f in findings["appeared"])
        + "".join(f"- disappeared: {cell(f['finding_type'])} — {cell(f['summary'])}\n" for f in findings["disappeared"])
        + "".join(
            f"- severity {cell(f['severity_before'])} → {cell(f['severity_after'])}: {cell(f['finding_type'])}\n"
            for f in findings["changed_severity"]
        )
        + f"- unchanged: {findings['unchanged_count']}\n"
    )
    parts.append("## Limitations\n\n" + "".join(f"- {cell(text)}\n" for text in summary["limitations"]))
    return "\n".join(parts)
