"""A sweep against a baseline root: every root compared on the same tables, and the rollup with deltas.

Works on any sweep archive (local ``npuprof sweep`` or the service): it reads the archive's
``sweep_class_rollup.csv`` and each root's output dir ``ARCHIVE/<slug>``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from npuprof.pipeline import csv_formulas, io, schema
from npuprof.pipeline.compare.render import SOURCES
from npuprof.pipeline.compare.run import compare_tables, structure
from npuprof.pipeline.compare.sides import load_side
from npuprof.pipeline.errors import UsageError

SERIES_COLUMNS = [
    "root",
    "slug",
    "level",
    "item",
    "status",
    "per_step_delta_ms",
    "median_ratio",
    "p_value",
    "base_evidence",
    "new_evidence",
]
DELTA_ROLLUP_COLUMNS = [
    "baseline_root",
    "compare_status",
    "step_wall_ms_baseline",
    "step_wall_ms_delta",
    "step_wall_ratio",
    "significant_changes",
    "top_gain",
    "top_regression",
]


def _baseline_row(rollup: pd.DataFrame, baseline: str) -> pd.Series:
    names = rollup["root"].astype(str)
    match = rollup[(names == baseline) | (rollup["slug"] == baseline) | (names.map(lambda r: Path(r).name) == baseline)]
    if match.empty:
        raise UsageError(f"--baseline {baseline!r} is not a root of this sweep (give its path, slug or dir name)")
    row = match.iloc[0]
    if row["status"] != "ok":
        raise UsageError(f"--baseline {baseline!r} did not analyze ({row['status']}): nothing to compare against")
    return row


def _label(level: str, row: pd.Series) -> str:
    columns = dict(SOURCES.values()).get(level) or []
    return " ".join(str(row[c]) for c in columns if c in row and pd.notna(row[c]))


def _series_rows(root: str, slug: str, tables: dict[str, pd.DataFrame]) -> list[dict]:
    rows = []
    for name, (level, _) in SOURCES.items():
        for _, row in tables[name].iterrows():  # classes and keys stay few
            rows.append(
                {
                    "root": root,
                    "slug": slug,
                    "level": level,
                    "item": _label(level, row),
                    **{c: row[c] for c in SERIES_COLUMNS[4:]},
                }
            )
    return rows


def _headline(tables: dict[str, pd.DataFrame]) -> dict:
    overview = tables[schema.COMPARE_OVERVIEW]
    wall = overview[(overview["rank_id"] == "all") & (overview["component"] == "wall_ms")]
    moves = []
    for name, (level, _) in SOURCES.items():
        changed = tables[name][tables[name]["status"] == "changed"]
        moves += [(float(r["per_step_delta_ms"]), f"{level}: {_label(level, r)}") for _, r in changed.iterrows()]
    # the most specific level that moved names the change (an operator says more than its whole step)
    specific = {"operator": 0, "collective": 0, "block_class": 1, "layer_class": 2, "step_class": 3}
    moves.sort(key=lambda m: (specific[m[1].split(":")[0]], -abs(m[0])))
    gains = [m for m in moves if m[0] < 0]
    losses = [m for m in moves if m[0] > 0]
    first = wall.iloc[0] if len(wall) else None
    return {
        "compare_status": "compared",
        "step_wall_ms_baseline": None if first is None else float(first["base_ms_per_step"]),
        "step_wall_ms_delta": None if first is None else float(first["delta_ms"]),
        "step_wall_ratio": None if first is None else first["ratio"],
        "significant_changes": len(moves),
        "top_gain": gains[0][1] if gains else None,
        "top_regression": losses[0][1] if losses else None,
    }


def compare_series(archive: str | Path, baseline: str, out_dir: str | Path) -> dict:
    """Every root of the sweep in ``archive`` against ``baseline``: compare_series.csv (one row per
    root × class / operator / collective) and the rollup with its delta columns."""
    archive = Path(archive)
    rollup_path = archive / schema.SWEEP_ROLLUP
    if not rollup_path.exists():
        raise UsageError(f"{archive} is not a sweep archive ({schema.SWEEP_ROLLUP} is missing)")
    rollup = csv_formulas.read_csv_view(rollup_path)
    base_row = _baseline_row(rollup, baseline)
    base_side = load_side(archive / base_row["slug"])
    series, extra = [], []
    for _, row in rollup.iterrows():  # roots of a sweep stay few (hundreds)
        delta = dict.fromkeys(DELTA_ROLLUP_COLUMNS)
        delta["baseline_root"] = base_row["root"]
        if row["status"] != "ok":
            delta["compare_status"] = f"not analyzed ({row['status']})"
        elif row["slug"] == base_row["slug"]:
            delta["compare_status"] = "baseline"
        else:
            side = load_side(archive / row["slug"])
            shape = structure(base_side, side)
            if not shape["same_model"]:
                delta["compare_status"] = "different model: " + ", ".join(shape["differing_fields"])
            else:
                tables = compare_tables(base_side, side)
                series += _series_rows(row["root"], row["slug"], tables)
                delta.update(_headline(tables))
        extra.append(delta)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    series_frame = pd.DataFrame(series, columns=SERIES_COLUMNS)
    series_frame = series_frame.sort_values(["root", "per_step_delta_ms"], key=_abs_for_delta, kind="stable")
    io.write_csv(out / schema.COMPARE_SERIES, series_frame)
    with_deltas = pd.concat([rollup, pd.DataFrame(extra, columns=DELTA_ROLLUP_COLUMNS)], axis=1)
    io.write_csv(out / schema.SWEEP_ROLLUP, with_deltas)
    statuses = pd.Series([e["compare_status"] for e in extra]).value_counts().to_dict()
    return {
        "status": "ok",
        "baseline": base_row["root"],
        "roots": len(rollup),
        "compare_status": statuses,
        "output_dir": str(out),
    }


def _abs_for_delta(column: pd.Series) -> pd.Series:
    """Sort roots by name, rows of a root by the absolute per-step delta (largest first)."""
    return -column.abs() if column.name == "per_step_delta_ms" else column
