"""What a sweep says beyond one row per root: cohorts, outliers, fleet suspects, trends, the Parquet
datasets and sweep_report.html — computed from the roots' cached rows in one pass at merge time, the
same for a local sweep and the service's merge task.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from npuprof.pipeline import csv_formulas, io, schema
from npuprof.pipeline.sweep.cohorts import (
    cohort_baselines,
    cohort_of,
    cohort_table,
    outlier_digest,
    outlier_rows,
    root_metrics,
)
from npuprof.pipeline.sweep.datasets import write_datasets
from npuprof.pipeline.sweep.fleet import fleet_suspects
from npuprof.pipeline.sweep.fleet_links import fleet_link_suspects
from npuprof.pipeline.sweep.html import render_sweep_report
from npuprof.pipeline.sweep.root_tables import TABLE_COLUMNS
from npuprof.pipeline.sweep.trends import sweep_trends

# the rollup columns added here
COHORT_COLUMNS = ["cohort_id", "cohort_size", "outlier_score", "outlier_metric", "outlier_what", "series_order"]


def sweep_tables(tables_by_slug: dict[str, dict[str, list[dict]]]) -> dict[str, pd.DataFrame]:
    """One frame per sweep table, each row tagged with its root's slug."""
    frames = {}
    for name, columns in TABLE_COLUMNS.items():
        rows = [{"slug": slug, **row} for slug, tables in tables_by_slug.items() for row in tables.get(name, [])]
        frames[name] = pd.DataFrame(rows, columns=["slug", *columns])
    return frames


def _rollup_columns(rollup: pd.DataFrame, cohorts: pd.DataFrame, outliers: pd.DataFrame) -> pd.DataFrame:
    """The rollup with each root's cohort, the |z| of its largest outlying move, and what moved."""
    keyed = rollup.drop(columns=[c for c in COHORT_COLUMNS if c in rollup]).merge(
        cohorts[["slug", "cohort_id", "cohort_label", "cohort_size"]], on="slug", how="left"
    )
    if len(outliers):
        first = outlier_digest(outliers).set_index("slug")
        keyed["outlier_score"] = keyed["slug"].map(first["robust_z"].abs())
        keyed["outlier_metric"] = keyed["slug"].map(first["metric"])
        keyed["outlier_what"] = keyed["slug"].map(first["what_moved"])
    else:
        keyed = keyed.assign(outlier_score=None, outlier_metric=None, outlier_what=None)
    return keyed


def _order_column(values: pd.Series) -> pd.Series:
    """Series order values as numbers when they all are, else as text (one type for a Parquet column)."""
    numeric = pd.to_numeric(values, errors="coerce")
    if numeric.notna().sum() == values.notna().sum():
        return numeric.astype(float)
    return values.map(lambda v: None if v is None or (isinstance(v, float) and pd.isna(v)) else str(v))


def _write_csv(archive: Path, name: str, frame: pd.DataFrame) -> None:
    io.write_with(archive / name, lambda tmp: csv_formulas.formula_safe(frame).to_csv(tmp, index=False))


@dataclass
class SweepFindings:
    """What a merged sweep says beyond one row per root (``analyze_sweep``)."""

    rollup: pd.DataFrame  # the rollup with its cohort, outlier and series columns
    tables: dict[str, pd.DataFrame]  # the roots' rows of each sweep table
    parts: dict[str, pd.DataFrame]  # cohorts, cohort_baselines, outliers, fleet_suspects, fleet_link_suspects, trends

    def summary(self, archive: Path) -> dict:
        """The additions to sweep_summary.json."""
        outliers, fleet, trends = self.parts["outliers"], self.parts["fleet_suspects"], self.parts["trends"]
        fleet_links = self.parts["fleet_link_suspects"]
        return {
            "cohort_count": len(self.parts["cohorts"]),
            "outlier_roots": sorted(outliers["slug"].unique().tolist()) if len(outliers) else [],
            "fleet_suspects": fleet["summary"].tolist(),
            "fleet_link_suspects": fleet_links["summary"].tolist(),
            "trends": trends["summary"].tolist(),
            "sweep_report": str(archive / schema.SWEEP_REPORT_HTML),
            "datasets": str(archive / schema.SWEEP_DATA_DIR),
        }


def analyze_sweep(rollup: pd.DataFrame, tables: dict[str, pd.DataFrame], series_key: str | None) -> SweepFindings:
    """Cohorts, outliers, fleet suspects (cards and links) and trends of a merged sweep (nothing written);
    ``tables``: each sweep table's rows of every root (``sweep_tables``)."""
    cohorts = cohort_of(rollup)
    metrics = root_metrics(rollup, tables)
    outliers, scores = outlier_rows(rollup, tables, cohorts, metrics)
    fleet = fleet_suspects(tables["ranks"], tables["findings"])
    trends, order = sweep_trends(rollup, cohorts, tables, series_key)
    rollup = _rollup_columns(rollup, cohorts, outliers)
    rollup["series_order"] = _order_column(rollup["slug"].map(order))
    parts = {
        "cohorts": cohort_table(cohorts, rollup, scores),
        "cohort_baselines": cohort_baselines(metrics, tables, cohorts),
        "outliers": outliers,
        "fleet_suspects": fleet,
        "fleet_link_suspects": fleet_link_suspects(tables["links"], tables["ranks"], cohorts),
        "trends": trends,
    }
    return SweepFindings(rollup, tables, parts)


# each part's CSV in the archive
PART_FILES = {
    "cohorts": schema.SWEEP_COHORTS,
    "cohort_baselines": schema.SWEEP_COHORT_BASELINES,
    "outliers": schema.SWEEP_OUTLIERS,
    "fleet_suspects": schema.FLEET_SUSPECTS,
    "fleet_link_suspects": schema.FLEET_LINK_SUSPECTS,
    "trends": schema.SWEEP_TRENDS,
}


def write_sweep_findings(archive: Path, found: SweepFindings, summary: dict) -> None:
    """sweep_cohorts.csv, sweep_outliers.csv, fleet_suspects.csv, fleet_link_suspects.csv, sweep_trends.csv,
    sweep_data/*.parquet
    and sweep_report.html, each atomically. When the archive fills up on the way, every one of them is
    removed (they hang together; the rollup, written before, stays) and the OSError is raised."""
    try:
        for part, frame in found.parts.items():
            _write_csv(archive, PART_FILES[part], frame)
        write_datasets(archive, {"roots": found.rollup, **found.tables, **found.parts})
        render_sweep_report(archive, found.rollup, found.parts, summary)
    except OSError:
        for name in (*PART_FILES.values(), schema.SWEEP_REPORT_HTML):
            (archive / name).unlink(missing_ok=True)
        shutil.rmtree(archive / schema.SWEEP_DATA_DIR, ignore_errors=True)
        raise
