"""Trends in a sweep: where a cohort's series of captures changed level.

Roots are put in order by ``--series-key`` (a regular expression on the root's path whose first group,
or whole match, is the order: a date, a build number) or else by capture time (the earliest event of
the root). Per cohort, the step wall and the cohort's top operator and collective classes are searched
for change points with ``ruptures`` (PELT, least-squares cost), penalised by the series' own noise
(``sweep_rules.yaml trends``); a change point is kept when the level moved by ``min_relative_change`` and
by an effect worth reading: ``min_delta_ms`` per step and ``min_wall_share`` of the cohort's step wall.
A class that appears from nothing has no ratio: its row says it appeared.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from npuprof import knowledge
from npuprof.pipeline.sweep.cohorts import MAD_TO_SIGMA, least_move_ms

TREND_COLUMNS = [
    "cohort_id",
    "metric",
    "series_key",
    "change_index",
    "change_at",
    "change_at_order",
    "before_ms",
    "after_ms",
    "relative_change",
    "movers",
    "summary",
]


def series_order(rollup: pd.DataFrame, ranks: pd.DataFrame, series_key: str | None) -> pd.Series:
    """The order value of each root (index: slug), NaN/None where it has none.

    With ``series_key`` the value is a number when the matched text is one, else the text; without, it
    is the capture time (ns since the epoch) of the root's earliest event."""
    if series_key:
        pattern = re.compile(series_key)

        def order(path: str) -> object:
            found = pattern.search(path)
            if not found:
                return None
            text = found.group(1) if pattern.groups else found.group(0)
            try:
                return float(text)
            except ValueError:
                return text

        return pd.Series([order(str(p)) for p in rollup["root"]], index=rollup["slug"].to_numpy(), dtype=object)
    if ranks.empty or "start_ns" not in ranks:
        return pd.Series(dtype=float)
    return ranks.groupby("slug")["start_ns"].min().astype(float)


def change_points(values: np.ndarray) -> list[int]:
    """Indices where a new level starts in ``values``: PELT on the least-squares cost (ruptures'
    kernel change point detection with the linear kernel, its compiled form of that cost)."""
    rules = knowledge.load("sweep_rules")["trends"]
    n = len(values)
    if n < int(rules["min_points"]):
        return []
    median = float(np.median(values))
    noise = MAD_TO_SIGMA * float(np.median(np.abs(np.diff(values) - np.median(np.diff(values))))) / np.sqrt(2)
    noise = max(noise, float(knowledge.load("sweep_rules")["outliers"]["spread_floor"]) * abs(median), 1e-9)
    penalty = float(rules["penalty"]) * np.log(n) * noise**2
    # imported here: ruptures (and the scipy it loads) is 0.7 s of importing the sweep, which every sweep
    # worker does to analyze roots; only the merge's trends need it
    import ruptures

    algo = ruptures.KernelCPD(kernel="linear", min_size=int(rules["min_segment"])).fit(values.reshape(-1, 1))
    return [int(b) for b in algo.predict(pen=penalty)[:-1]]


def _segments(values: np.ndarray, breaks: list[int]) -> list[tuple[int, float, float]]:
    """(index, median before, median after) of each change, between its neighbouring changes."""
    edges = [0, *breaks, len(values)]
    return [
        (edges[i], float(np.median(values[edges[i - 1] : edges[i]])), float(np.median(values[edges[i] : edges[i + 1]])))
        for i in range(1, len(edges) - 1)
    ]


def _class_series(slugs: list[str], tables: dict[str, pd.DataFrame], top: int) -> dict[str, pd.Series]:
    """The cohort's ``top`` operators and collectives by median ms per step, each as a series over ``slugs``."""
    found = {}
    for table, key in (("operators", "name"), ("collectives", "collective")):
        frame = tables.get(table, pd.DataFrame())
        if frame.empty:
            continue
        wide = frame[frame["slug"].isin(slugs)].pivot_table(index="slug", columns=key, values="ms_per_step")
        wide = wide.reindex(slugs).fillna(0.0)
        for name in wide.median().nlargest(top).index:
            found[str(name)] = wide[name]
    return found


def _movers(classes: dict[str, pd.Series], index: int, breaks: list[int], listed: int) -> str:
    """The classes whose level moved most at a change of the step wall: "name +30 %"."""
    edges = [0, *breaks, len(next(iter(classes.values()))) if classes else 0]
    at = edges.index(index)
    least = float(knowledge.load("sweep_rules")["trends"]["min_relative_change"])
    moves = []
    for name, series in classes.items():
        before = float(series.iloc[edges[at - 1] : index].median())
        after = float(series.iloc[index : edges[at + 1]].median())
        if before > 0 and abs(after / before - 1) >= least:
            moves.append((abs(after - before), name, after / before - 1))
    return ", ".join(f"{name} {change:+.0%}" for _, name, change in sorted(moves, reverse=True)[:listed])


def cohort_trends(
    cohort_id: str, order: pd.Series, walls: pd.Series, tables: dict[str, pd.DataFrame], key: str
) -> list:
    """The change points of one cohort's series (``order``: slug -> order value, sorted)."""
    rules = knowledge.load("sweep_rules")["trends"]
    slugs = list(order.index)
    classes = _class_series(slugs, tables, int(rules["top_classes"]))
    least_ms = float(least_move_ms(rules, float(walls.reindex(slugs).median())))
    rows = []
    for metric, series in {"step wall": walls.reindex(slugs), **classes}.items():
        values = series.to_numpy(dtype=float)
        if np.isnan(values).any():
            continue
        breaks = change_points(values)
        for index, before, after in _segments(values, breaks):
            change = after / before - 1 if before else None  # from nothing: no ratio (it appeared)
            if not abs(after - before) >= least_ms or (
                change is not None and abs(change) < rules["min_relative_change"]
            ):
                continue
            movers = _movers(classes, index, breaks, int(rules["movers_listed"])) if metric == "step wall" else ""
            moved = f"{'rose' if after > before else 'fell'} {abs(change):.0%}" if change is not None else "appeared"
            summary = f"{metric} {moved} from {slugs[index]} on" + (f" ({movers})" if movers else "")
            rows.append(
                {
                    "cohort_id": cohort_id,
                    "metric": metric,
                    "series_key": key,
                    "change_index": index,
                    "change_at": slugs[index],
                    "change_at_order": order.iloc[index],
                    "before_ms": round(before, 6),
                    "after_ms": round(after, 6),
                    "relative_change": round(change, 4) if change is not None else None,
                    "movers": movers,
                    "summary": summary,
                }
            )
    return rows


def sweep_trends(
    rollup: pd.DataFrame, cohorts: pd.DataFrame, tables: dict[str, pd.DataFrame], series_key: str | None
) -> tuple[pd.DataFrame, pd.Series]:
    """sweep_trends.csv over every cohort, and each root's order value (for the rollup and the plots)."""
    order = series_order(rollup, tables.get("ranks", pd.DataFrame()), series_key)
    walls = rollup.set_index("slug")["top_step_class_wall_ms_mean"].astype(float)
    key = f"--series-key {series_key}" if series_key else "capture time"
    rows = []
    for cohort_id, members in cohorts.dropna(subset=["cohort_id"]).groupby("cohort_id"):
        ordered = order.reindex(members["slug"]).dropna()
        if ordered.map(type).nunique() > 1:  # numbers and text mixed: no order to trust
            continue
        rows += cohort_trends(str(cohort_id), ordered.sort_values(kind="stable"), walls, tables, key)
    return pd.DataFrame(rows, columns=TREND_COLUMNS), order
