"""sweep_report.html: a sweep's cohorts, outliers, fleet suspects and trends on one page.

One self-contained file that opens from ``file://``: plotly's bundled plotly.js is inlined (no
network), every name from the captures is escaped, and each root links to its own report.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pandas as pd

from npuprof import knowledge
from npuprof.pipeline import io, schema
from npuprof.pipeline.sweep.cohorts import outlier_digest

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1200px; color: #1c2430; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #dde3ea; }
table { border-collapse: collapse; width: 100%; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid #dde3ea; padding: 4px 6px; text-align: left; vertical-align: top; overflow-wrap: anywhere; }
td.num, th { white-space: nowrap; }
th { background: #f3f6f9; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
p.none { color: #5b6776; } .kpi { display: inline-block; margin-right: 28px; }
.kpi b { display: block; font-size: 20px; }
"""


def _cell(value: object) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)) or value is pd.NA:
        return "<td></td>"
    if isinstance(value, float):
        return f'<td class="num">{value:,.3f}</td>'
    if isinstance(value, int):
        return f'<td class="num">{value:,}</td>'
    return f"<td>{html.escape(str(value))}</td>"


def report_links(archive: Path, slugs: list[str]) -> dict[str, str]:
    """Each root's own report, relative to the archive: report.html (full mode), else report.md."""
    links = {}
    for slug in slugs:
        for name in (schema.REPORT_HTML, schema.REPORT_MD):
            if (Path(archive) / slug / name).is_file():
                links[slug] = f"{slug}/{name}"
                break
    return links


def _table(frame: pd.DataFrame, columns: list[str], empty: str, links: dict[str, str] | None = None) -> str:
    """An HTML table of ``columns`` (escaped); ``links`` turns a slug cell into a link to the root's report."""
    shown = [c for c in columns if c in frame]
    if frame.empty or not shown:
        return f'<p class="none">{html.escape(empty)}</p>'
    head = "".join(f"<th>{html.escape(c)}</th>" for c in shown)
    rows = []
    for record in frame[shown].astype(object).where(frame[shown].notna(), None).to_dict("records"):
        cells = []
        for column in shown:
            value = record[column]
            if links and column == "slug" and value in links:
                href = html.escape(links[value], quote=True)
                cells.append(f'<td><a href="{href}">{html.escape(str(value))}</a></td>')
            else:
                cells.append(_cell(value))
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _trend_figure(cohort_id: str, label: str, points: pd.DataFrame, changes: pd.DataFrame) -> str:
    """Step wall per root of one cohort, in series order; outliers in red, change points as lines."""
    import plotly.graph_objects as go

    colors = ["#c0392b" if flagged else "#2e6da4" for flagged in points["is_outlier"]]
    # each point under its capture's name: the slug's last path part without its hash
    names = points["slug"].str.replace(r"-[0-9a-f]{8}$", "", regex=True).str.split("__").str[-1]
    figure = go.Figure(
        go.Scatter(
            x=list(range(len(points))),
            y=points["top_step_class_wall_ms_mean"],
            mode="lines+markers",
            marker={"color": colors, "size": 9},
            text=points["slug"],
            hovertemplate="%{text}<br>step wall %{y:.3f} ms<extra></extra>",
        )
    )
    for index in changes[changes["metric"] == "step wall"]["change_index"]:
        figure.add_vline(x=float(index) - 0.5, line_dash="dash", line_color="#8e44ad")
    figure.update_layout(
        # below plotly's toolbar (the top 30 px, right), which covered a long title's end
        title={"text": html.escape(f"{cohort_id}: {label}")[:160], "x": 0.01, "xanchor": "left", "y": 0.89},
        xaxis_title="capture, in series order (else by name)",
        xaxis={"tickmode": "array", "tickvals": list(range(len(points))), "ticktext": names.tolist(), "tickangle": -45},
        yaxis_title="step wall (ms)",
        yaxis_rangemode="tozero",
        height=400,
        margin={"l": 60, "r": 20, "t": 70, "b": 110},
    )
    return figure.to_html(full_html=False, include_plotlyjs=False, div_id=f"trend-{cohort_id}")


def _figures(rollup: pd.DataFrame, trends: pd.DataFrame) -> str:
    finished = rollup[rollup["cohort_id"].notna() & rollup["top_step_class_wall_ms_mean"].notna()]
    blocks = []
    for cohort_id, points in finished.groupby("cohort_id", sort=True):
        ordered = points.sort_values(["series_order", "slug"], na_position="last", kind="stable")
        ordered = ordered.assign(is_outlier=ordered["outlier_score"].fillna(0) > 0)
        changes = trends[trends["cohort_id"] == cohort_id]
        blocks.append(_trend_figure(str(cohort_id), str(ordered["cohort_label"].iloc[0]), ordered, changes))
    return "\n".join(blocks) or '<p class="none">no finished root to plot</p>'


def fleet_findings(rollup: pd.DataFrame) -> pd.DataFrame:
    """Per finding type over the sweep's roots: on how many roots it was found, on how many it is the
    finding that recovers the most, and the root where that is largest (ms per step, its slug)."""
    columns = ["finding_type", "roots", "top_finding_on", "most_recovered_ms_per_step", "slug"]
    if rollup.empty or "findings_by_type" not in rollup:
        return pd.DataFrame(columns=columns)
    # a loop over roots (hundreds), each's {type: count} as the rollup holds it (a dict, or its JSON text)
    found = [t for value in rollup["findings_by_type"].dropna() for t in _counts(value)]
    roots = pd.Series(found, dtype=object).value_counts().rename("roots")
    top = rollup.dropna(subset=["top_recoverable_finding", "top_recoverable_ms_per_step"])
    top = top.sort_values("top_recoverable_ms_per_step", ascending=False, kind="stable")
    most = top.drop_duplicates("top_recoverable_finding").set_index("top_recoverable_finding")
    table = pd.DataFrame({"roots": roots}).join(top["top_recoverable_finding"].value_counts().rename("top_finding_on"))
    table = table.join(most[["top_recoverable_ms_per_step", "slug"]]).rename(
        columns={"top_recoverable_ms_per_step": "most_recovered_ms_per_step"}
    )
    table = table.rename_axis("finding_type").reset_index().fillna({"top_finding_on": 0})
    table["top_finding_on"] = table["top_finding_on"].astype(int)
    return table.sort_values(["roots", "finding_type"], ascending=[False, True], kind="stable")[columns]


def _counts(value: object) -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {}
    return value if isinstance(value, dict) else {}


def listed_roots(rollup: pd.DataFrame) -> pd.DataFrame:
    """The roots the page lists: failed ones first, then outliers (largest score first), then the rest
    by name, at most ``report.roots_listed`` (sweep_rules.yaml): a 10,000-row table is for the CSV."""
    most = int(knowledge.load("sweep_rules")["report"]["roots_listed"])
    # ascending sort keys: a finished root after a failed one, a larger score before a smaller
    keys = {"_finished": rollup["status"].eq("ok"), "_score": -rollup["outlier_score"].astype(float).fillna(-np.inf)}
    ordered = rollup.assign(**keys).sort_values([*keys, "slug"], kind="stable").drop(columns=list(keys))
    return ordered.head(most)


def _more_roots(total: int, listed: int) -> str:
    if listed >= total:
        return ""
    return (
        f'<p class="none">{listed:,} of {total:,} roots listed (failed, then outliers, then by name); '
        f"every root is in {html.escape(schema.SWEEP_ROLLUP)} and sweep_data/roots.parquet</p>"
    )


def _kpis(rollup: pd.DataFrame, parts: dict[str, pd.DataFrame], summary: dict) -> list[tuple[str, int]]:
    """The counts at the top of the page."""
    counts = summary.get("status_counts", {})
    return [
        ("roots", summary.get("root_count", len(rollup))),
        ("analyzed", counts.get("ok", 0)),
        ("failed", counts.get("failed", 0)),
        ("cohorts", len(parts["cohorts"])),
        ("outlier roots", parts["outliers"]["slug"].nunique() if len(parts["outliers"]) else 0),
        ("fleet suspects", len(parts["fleet_suspects"])),
        ("link suspects", len(parts["fleet_link_suspects"])),
        ("change points", len(parts["trends"])),
    ]


OUTLIER_COLUMNS = "slug metric off_by value_ms cohort_median_ms what_moved root_top_finding also_off".split()
ROOT_COLUMNS = (
    "slug status cohort_id host_names top_step_class_wall_ms_mean top_recoverable_finding "
    "top_recoverable_ms_per_step outlier_score error"
).split()


def render_sweep_report(archive: Path, rollup: pd.DataFrame, parts: dict[str, pd.DataFrame], summary: dict) -> Path:
    """Write ``ARCHIVE/sweep_report.html`` (atomically) and return its path."""
    from plotly.offline import get_plotlyjs

    listed = listed_roots(rollup)
    outlying = parts["outliers"]["slug"].tolist() if len(parts["outliers"]) else []
    findings = fleet_findings(rollup)
    named = set(listed["slug"].dropna()) | set(outlying) | set(findings["slug"].dropna())
    links = report_links(archive, sorted(named))
    kpis = _kpis(rollup, parts, summary)
    body = [
        "<h1>npuprof sweep</h1>",
        "".join(f'<span class="kpi"><b>{value:,}</b>{html.escape(name)}</span>' for name, value in kpis),
        "<h2>Findings</h2>",
        _table(findings, list(findings.columns), "no root has a finding", links),
        "<h2>Fleet suspects</h2>",
        _table(parts["fleet_suspects"], ["summary", "flagged", "appearances", "roots"], "no card is named again"),
        "<h2>Link suspects</h2>",
        _table(
            parts["fleet_link_suspects"],
            ["summary", "flagged", "appearances", "cohorts", "roots"],
            "no link is slow again",
        ),
        "<h2>Outliers</h2>",
        _table(outlier_digest(parts["outliers"]), OUTLIER_COLUMNS, "no root is off its cohort", links),
        "<h2>Trends</h2>",
        _table(parts["trends"], ["cohort_id", "summary", "before_ms", "after_ms"], "no change point in any series"),
        _figures(rollup, parts["trends"]),
        "<h2>Cohorts</h2>",
        _table(parts["cohorts"], ["cohort_id", "root_count", "step_wall_ms_median", "cohort_label"], "no cohort"),
        "<h2>Roots</h2>",
        _more_roots(len(rollup), len(listed)),
        _table(listed, ROOT_COLUMNS, "no root", links),
    ]
    page = (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>npuprof sweep</title>'
        f"<style>{_STYLE}</style><script>{get_plotlyjs()}</script></head><body>" + "\n".join(body) + "</body></html>"
    )
    target = Path(archive) / schema.SWEEP_REPORT_HTML
    io.write_with(target, lambda tmp: tmp.write_text(page, encoding="utf-8"))
    return target
