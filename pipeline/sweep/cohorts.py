"""Cohorts of a sweep and the roots that are off their cohort.

A cohort is the roots of one configuration: model fingerprint × parallel layout × software ×
hardware (``sweep_rules.yaml cohort_fields``). Its baseline is, per metric, the median and the robust
spread (1.4826 × MAD) over its roots. A root is scored on each metric with a robust z; where it is off,
the most specific thing that moved is named: an operator or a collective before a block class, a
layer class, the step.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from npuprof import knowledge
from npuprof.pipeline import schema

MAD_TO_SIGMA = 1.4826  # the MAD of a normal sample times this is its standard deviation
# a serving root is scored per phase too (a step wall over prefills and decodes together describes
# neither): each phase's forward wall p50 and the idle before its forwards p50, from the rollup's
# <phase>_wall_p50_ms / <phase>_gap_p50_ms; a root that did not run a phase is not scored on it
SERVING_PHASES = ("prefill", "mixed", "decode")
PHASE_METRICS = {
    f"{phase} {figure}": f"{phase}_{column}"
    for phase in SERVING_PHASES
    for figure, column in (("forward wall p50", "wall_p50_ms"), ("gap before forwards p50", "gap_p50_ms"))
}
# levels of "what moved", most specific first: sweep table, its key column, its value column
MOVER_LEVELS = (
    ("operator", "operators", "name", "ms_per_step"),
    ("collective", "collectives", "collective", "ms_per_step"),
    ("block class", "block_class_stats", "block_class_id", "step_ms"),
    ("layer class", "layer_class_stats", "layer_class_id", "step_ms"),
)
MOVER_EVIDENCE = {
    "operator": schema.OPERATOR_CLASS_SUMMARY_CSV.file,
    "collective": schema.HCCL_CLASS_SUMMARY_CSV.file,
    "block class": schema.BLOCK_CLASS_SUMMARY_CSV.file,
    "layer class": schema.LAYER_CLASS_SUMMARY_CSV.file,
    "step": schema.STEP_SUMMARY.file,
    "time split": schema.STEP_TIME_ACCOUNTING_CSV.file,
    "forwards": schema.FORWARD_SUMMARY_CSV.file,  # a serving root's phase metrics: each forward's wall and gap
}
# which levels can explain a metric: compute time moves by operators and classes, exposed communication
# by collectives, idle by neither (it is its own answer), the step wall by any
METRIC_MOVERS = (
    ("compute", ("operator", "block class", "layer class")),
    ("communication", ("collective",)),
    ("exposed", ("collective",)),
    ("step wall", tuple(level for level, *_ in MOVER_LEVELS)),
)


def _field_text(value: object) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NA:
        return "?"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _label(row: pd.Series, fields: dict[str, list[str]], words: dict[str, str]) -> str:
    """A cohort's key as a person reads it: "model Qwen3-0.6B, hidden 1024; parallel world 4, TP1, PP2,
    DP2; hardware Ascend910B4" (unknown fields left out, a group that knows none says so)."""
    groups = []
    for group, columns in fields.items():
        known = [(words.get(c, c), _field_text(row.get(c))) for c in columns if _field_text(row.get(c)) != "?"]
        said = [f"{word}{value}" if word[-1:].isupper() else f"{word} {value}".strip() for word, value in known]
        groups.append(f"{group} " + (", ".join(said) if said else "unknown"))
    return "; ".join(groups)


def cohort_of(rollup: pd.DataFrame) -> pd.DataFrame:
    """Per root (by slug): ``cohort_id`` (a short hash of the key), ``cohort_label`` (the key in words)
    and ``cohort_size``. Roots that did not finish are in no cohort."""
    rules = knowledge.load("sweep_rules")
    fields, words = rules["cohort_fields"], rules.get("cohort_words", {})
    # a key and a label per distinct configuration (a few), not per root (thousands)
    keyed = rollup.reindex(columns=[c for cs in fields.values() for c in cs])
    configuration = keyed.astype(str).groupby(list(keyed.columns), dropna=False, sort=False).ngroup().to_numpy()
    firsts = keyed.groupby(configuration, sort=True).head(1)
    named = {
        int(config): (
            " ".join(f"{g}=" + "/".join(_field_text(row.get(c)) for c in cs) for g, cs in fields.items()),
            _label(row, fields, words),
        )
        for config, (_, row) in zip(configuration[firsts.index.to_numpy()], firsts.iterrows())
    }
    keys = [named[int(config)][0] for config in configuration]
    labels = [named[int(config)][1] for config in configuration]
    finished = (rollup["status"] == "ok").to_numpy()
    labels = [label if done else None for label, done in zip(labels, finished)]
    ids = [
        "cohort_" + hashlib.sha1(key.encode()).hexdigest()[:8] if done else None for key, done in zip(keys, finished)
    ]
    cohorts = pd.DataFrame({"slug": rollup["slug"].to_numpy(), "cohort_label": labels, "cohort_id": ids}, dtype=object)
    cohorts["cohort_size"] = cohorts.groupby("cohort_id")["slug"].transform("size").astype("Int64")
    return cohorts


def root_metrics(rollup: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The metrics a root is scored on, long form (slug, metric, value, ms per step): the step wall,
    where the step's time went (compute as one, exposed communication by kind, idle by window) and
    exposed communication by parallel role and kind.

    Compute is the kernels' own time, not split by bound family: a kernel near a family's threshold
    (a grouped matmul whose rows per expert follow the routing) moves between families from capture to
    capture while its time does not change; what moved inside compute is named by its operators."""
    walls = rollup[["slug", "top_step_class_wall_ms_mean"]].dropna()
    parts = [walls.rename(columns={"top_step_class_wall_ms_mean": "value"}).assign(metric="step wall")]
    for metric, column in PHASE_METRICS.items():
        if column in rollup:
            found = rollup[["slug", column]].dropna()
            parts.append(found.rename(columns={column: "value"}).assign(metric=metric))
    split = tables.get("time_split", pd.DataFrame())
    if len(split):
        named = split[split["breakdown"].isin(["primary", "comm_by_role_kind"])]
        primary = named["breakdown"] == "primary"
        head = named["category"].where(primary, "exposed")
        metric = (head + " " + named["component"]).where(~primary | (named["category"] != "compute"), "compute")
        found = pd.DataFrame({"slug": named["slug"], "metric": metric, "value": named["ms_per_step"]})
        parts.append(found.groupby(["slug", "metric"], as_index=False, sort=False)["value"].sum())
    return pd.concat(parts, ignore_index=True)[["slug", "metric", "value"]]


def robust_scores(metrics: pd.DataFrame, cohorts: pd.DataFrame) -> pd.DataFrame:
    """Each root's metrics against its cohort: median, spread (floored), robust z, delta.

    A metric a root lacks counts as 0 ms where its cohort has it (absent time is no time), but for a phase
    it did not run (``PHASE_METRICS``: not scored on it); cohorts smaller than ``min_cohort_size`` are not
    scored.
    """
    rules = knowledge.load("sweep_rules")["outliers"]
    sized = cohorts.dropna(subset=["cohort_id"])
    sized = sized[sized["cohort_size"] >= int(rules["min_cohort_size"])]
    wide = metrics.pivot_table(index="slug", columns="metric", values="value", aggfunc="sum")
    wide = wide.reindex(sized["slug"])
    timed = [metric for metric in wide.columns if metric not in PHASE_METRICS]
    wide[timed] = wide[timed].fillna(0.0)
    if wide.empty:
        return pd.DataFrame(columns=["slug", "cohort_id", "metric", "value", "median", "spread", "z", "delta"])
    long = wide.stack().dropna().rename("value").reset_index()
    long = long.merge(sized[["slug", "cohort_id"]], on="slug")
    grouped = long.groupby(["cohort_id", "metric"])["value"]
    long["median"] = grouped.transform("median")
    long["mad"] = (
        (long["value"] - long["median"]).abs().groupby([long["cohort_id"], long["metric"]]).transform("median")
    )
    long["spread"] = np.maximum(MAD_TO_SIGMA * long.pop("mad"), float(rules["spread_floor"]) * long["median"].abs())
    long["delta"] = long["value"] - long["median"]
    long["z"] = np.where(long["spread"] > 0, long["delta"] / long["spread"].where(long["spread"] > 0, 1.0), 0.0)
    return long


def least_move_ms(rules: dict, cohort_wall_ms):
    """The least move worth a row (an outlier's or a trend's, ``rules`` their section of
    sweep_rules.yaml): ``min_delta_ms`` per step, and ``min_wall_share`` of the cohort's median step
    wall (a number, or an array of them; an unknown wall leaves ``min_delta_ms``)."""
    return np.fmax(float(rules["min_delta_ms"]), float(rules["min_wall_share"]) * cohort_wall_ms)


def outlying(scores: pd.DataFrame) -> pd.DataFrame:
    """The scores that make their root an outlier (``sweep_rules.yaml outliers``), per root the largest
    move in ms per step first: effect before significance (a 0.27 ms overlap at z 8 is not the headline
    of a root whose compute grew 1.3 ms at z 4.6)."""
    rules = knowledge.load("sweep_rules")["outliers"]
    relative = scores["delta"].abs() / scores["median"].abs().where(scores["median"] != 0, np.inf)
    walls = scores[scores["metric"] == "step wall"].groupby("cohort_id")["median"].first()
    least_ms = least_move_ms(rules, scores["cohort_id"].map(walls).fillna(0.0))
    passing = (
        (scores["z"].abs() >= float(rules["z_min"]))
        & (scores["delta"].abs() >= least_ms)
        & ((relative >= float(rules["min_relative_change"])) | (scores["median"] == 0))
    )
    found = scores[passing].copy()
    found["effect"] = found["delta"].abs()
    return found.sort_values(["slug", "effect"], ascending=[True, False]).drop(columns="effect")


def _per_step_classes(tables: dict[str, pd.DataFrame], rollup: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Block and layer class rows with ``step_ms``: their wall per step per rank (mean × members per step)."""
    per_step = rollup.set_index("slug")
    instances = (per_step["rank_count"].astype(float) * per_step["complete_step_count"].astype(float)).clip(lower=1)
    out = dict(tables)
    for table in ("block_class_stats", "layer_class_stats"):
        frame = tables.get(table, pd.DataFrame())
        if len(frame):
            count = frame["slug"].map(instances).fillna(1.0)
            out[table] = frame.assign(step_ms=frame["wall_ms_mean"] * frame["member_count"] / count)
    return out


def mover_deltas(tables: dict[str, pd.DataFrame], cohorts: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per level of ``MOVER_LEVELS``: each root's value of each thing (slug × key) minus its cohort's
    median — one pivot per level for the whole sweep. Operators and collectives a root lacks count as
    0 ms; classes it lacks stay unknown."""
    cohort_of_slug = cohorts.dropna(subset=["cohort_id"]).set_index("slug")["cohort_id"]
    deltas = {}
    for level, table, key, value in MOVER_LEVELS:
        frame = tables.get(table, pd.DataFrame())
        if frame.empty or value not in frame:
            continue
        wide = frame[frame["slug"].isin(cohort_of_slug.index)].pivot_table(
            index="slug", columns=key, values=value, aggfunc="sum"
        )
        if level in ("operator", "collective"):
            wide = wide.fillna(0.0)
        deltas[level] = wide - wide.groupby(cohort_of_slug.reindex(wide.index)).transform("median")
    return deltas


def explain_moves(found: pd.DataFrame, deltas: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """For each outlying score of ``found`` (slug, metric, delta), the most specific thing that moved
    it against its cohort: ``level``, ``name`` and ``moved`` (ms per step) — the first level that can
    move that metric (``METRIC_MOVERS``: an operator for compute, a collective for communication) whose
    largest move in the direction of the delta explains ``explain_min_share`` of it; else the metric
    itself (the step, or that part of it). One array operation per level over all the scores."""
    share = float(knowledge.load("sweep_rules")["outliers"]["explain_min_share"])
    metric, delta = found["metric"].astype(str), found["delta"].to_numpy(dtype=float)
    count, sign = len(found), np.sign(delta)
    level = np.full(count, None, dtype=object)
    name = np.full(count, None, dtype=object)
    moved = delta.copy()
    # each metric takes the movers of the first head it starts with (METRIC_MOVERS' order)
    head_of = np.full(count, -1)
    for index in reversed(range(len(METRIC_MOVERS))):
        head_of = np.where(metric.str.startswith(METRIC_MOVERS[index][0]).to_numpy(), index, head_of)
    for current, *_ in MOVER_LEVELS:  # most specific first: the order every head's levels follow
        wide = deltas.get(current)
        heads = [index for index, (_, levels) in enumerate(METRIC_MOVERS) if current in levels]
        can = np.isin(head_of, heads)
        if wide is None or wide.shape[1] == 0:
            continue
        values = wide.reindex(found["slug"]).to_numpy(dtype=float) * sign[:, None]
        values = np.where(np.isnan(values), -np.inf, values)
        best = values.argmax(axis=1)
        top = values[np.arange(count), best]
        hit = can & pd.isna(level) & np.isfinite(top) & (top >= share * np.abs(delta))
        level = np.where(hit, current, level)
        name = np.where(hit, wide.columns.to_numpy(dtype=object)[best].astype(str), name)
        moved = np.where(hit, top * sign, moved)
    unexplained = pd.isna(level)
    step = unexplained & (metric == "step wall").to_numpy()
    phase = unexplained & metric.isin(list(PHASE_METRICS)).to_numpy()
    level = np.where(step, "step", np.where(phase, "forwards", np.where(unexplained, "time split", level)))
    name = np.where(unexplained, metric.to_numpy(dtype=object), name)
    return pd.DataFrame({"level": level, "name": name, "moved": moved}, index=found.index)


def what_moved(slug: str, metric: str, delta_ms: float, deltas: dict[str, pd.DataFrame]) -> tuple[str, str, float]:
    """``explain_moves`` of one score: (level, name, delta ms per step)."""
    one = explain_moves(pd.DataFrame({"slug": [slug], "metric": [metric], "delta": [delta_ms]}), deltas).iloc[0]
    return str(one["level"]), str(one["name"]), float(one["moved"])


def outlier_digest(outliers: pd.DataFrame) -> pd.DataFrame:
    """One row per outlying root (``outlier_rows`` lists its metrics largest move first): its largest
    outlying metric, how far off in people's terms (``off_by``: ms and % of the cohort's median; the
    robust z stays in sweep_outliers.csv), what moved ("block attention", or the whole step where no
    narrower part moved enough), and its other outlying metrics."""
    if outliers.empty:
        return outliers
    first = outliers.drop_duplicates("slug").copy()
    others = outliers.groupby("slug")["metric"].apply(lambda m: ", ".join(m.iloc[1:]))
    first["also_off"] = first["slug"].map(others)
    level = first["what_moved_level"]
    itself = level.isin(["time split", "forwards"])  # the metric is its own answer
    named = (level + " " + first["what_moved"]).where(~itself, first["what_moved"] + " itself")
    first["what_moved"] = named.where(level != "step", "the whole step (no narrower part moved enough)")
    median = first["cohort_median_ms"].where(first["cohort_median_ms"].abs() > 0)
    percent = (100 * first["delta_ms"] / median).map(
        lambda p: "" if pd.isna(p) else f" ({p:+.0f} % of the cohort median)"
    )
    first["off_by"] = first["delta_ms"].map(lambda d: f"{d:+,.2f} ms") + percent
    return first


def _top_findings(rollup: pd.DataFrame) -> dict[str, str]:
    """Each root's most recoverable finding, "type (ranks r;s)": what its own analysis blames."""
    named = rollup.dropna(subset=["top_recoverable_finding"])
    return {
        slug: f"{finding} (ranks {ranks})" if isinstance(ranks, str) and ranks else str(finding)
        for slug, finding, ranks in zip(named["slug"], named["top_recoverable_finding"], named["top_recoverable_ranks"])
    }


def outlier_rows(
    rollup: pd.DataFrame, tables: dict[str, pd.DataFrame], cohorts: pd.DataFrame, metrics: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """sweep_outliers.csv (one row per outlying metric of a root, with what moved and where the
    evidence is) and all scores (for the rollup's per-root outlier columns)."""
    scores = robust_scores(metrics, cohorts)
    found = outlying(scores)
    deltas = mover_deltas(_per_step_classes(tables, rollup), cohorts)
    top_finding = _top_findings(rollup)
    moves = explain_moves(found, deltas)
    rounded = {
        column: found[column].astype(float).map(lambda v, d=digits: round(v, d))
        for column, digits in (("value", 6), ("median", 6), ("z", 3), ("delta", 6))
    }
    level = moves["level"].astype(object)
    table = pd.DataFrame(
        {
            "slug": found["slug"],
            "cohort_id": found["cohort_id"],
            "metric": found["metric"],
            "value_ms": rounded["value"],
            "cohort_median_ms": rounded["median"],
            "robust_z": rounded["z"],
            "delta_ms": rounded["delta"],
            "what_moved_level": level,
            "what_moved": moves["name"].astype(object),
            "what_moved_delta_ms": moves["moved"].map(lambda v: round(float(v), 6)),
            "evidence": found["slug"].astype(str) + "/" + level.map(MOVER_EVIDENCE),
            "root_top_finding": found["slug"].map(top_finding),
        }
    )
    return table.reset_index(drop=True), scores


def cohort_table(cohorts: pd.DataFrame, rollup: pd.DataFrame, scores: pd.DataFrame) -> pd.DataFrame:
    """sweep_cohorts.csv: each cohort's key, roots, and its step-wall baseline (median, spread)."""
    known = cohorts.dropna(subset=["cohort_id"]).merge(rollup[["slug", "top_step_class_wall_ms_mean"]], on="slug")
    if known.empty:
        return pd.DataFrame(columns=["cohort_id", "cohort_label", "root_count", "step_wall_ms_median"])
    table = known.groupby(["cohort_id", "cohort_label"], as_index=False).agg(
        root_count=("slug", "size"), step_wall_ms_median=("top_step_class_wall_ms_mean", "median")
    )
    wall = scores[scores["metric"] == "step wall"].groupby("cohort_id")["spread"].first()
    table["step_wall_ms_spread"] = table["cohort_id"].map(wall)
    table["scored"] = table["cohort_id"].isin(wall.index)
    return table.sort_values(["root_count", "cohort_id"], ascending=[False, True])


# baseline levels: sweep table, its key column, its value column (what one root says of that thing)
BASELINE_LEVELS = (
    ("step class", "step_class_stats", "step_class_id", "wall_ms_mean"),
    ("layer class", "layer_class_stats", "layer_class_id", "wall_ms_mean"),
    ("block class", "block_class_stats", "block_class_id", "wall_ms_mean"),
    ("operator", "operators", "name", "ms_per_step"),
    ("collective", "collectives", "collective", "ms_per_step"),
)


def cohort_baselines(metrics: pd.DataFrame, tables: dict[str, pd.DataFrame], cohorts: pd.DataFrame) -> pd.DataFrame:
    """sweep_cohort_baselines.csv: per cohort and thing (the scored metrics, each step / layer / block
    class by its mean wall, each operator and collective by its ms per step), the median and robust
    spread over the cohort's roots that have it, and how many do."""
    parts = [metrics.rename(columns={"metric": "key"}).assign(level="metric")]
    for level, table, key, value in BASELINE_LEVELS:
        frame = tables.get(table, pd.DataFrame())
        if len(frame):
            named = {"slug": frame["slug"], "key": frame[key], "value": frame[value], "level": level}
            parts.append(pd.DataFrame(named))
    long = pd.concat(parts, ignore_index=True).dropna(subset=["value"])
    long = long.merge(cohorts.dropna(subset=["cohort_id"])[["slug", "cohort_id"]], on="slug")
    columns = ["cohort_id", "level", "key", "root_count", "median", "spread"]
    if long.empty:
        return pd.DataFrame(columns=columns)
    long = long.groupby(["cohort_id", "level", "key", "slug"], as_index=False)["value"].sum()  # one value per root
    grouped = long.groupby(["cohort_id", "level", "key"])["value"]
    long["deviation"] = (long["value"] - grouped.transform("median")).abs()
    table = long.groupby(["cohort_id", "level", "key"], as_index=False).agg(
        root_count=("slug", "size"), median=("value", "median"), mad=("deviation", "median")
    )
    table["spread"] = MAD_TO_SIGMA * table.pop("mad")
    return table[columns]
