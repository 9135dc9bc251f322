"""Markdown building blocks of the reports: inert cells, code spans, tables, shares."""

from __future__ import annotations

import pandas as pd

from npuprof.pipeline.terminal_text import printable

MD_SPECIAL = str.maketrans({c: f"\\{c}" for c in "\\`*_[]|~"} | {"<": "&lt;", ">": "&gt;", "&": "&amp;"})


def cell(value: object) -> str:
    """``value`` as inert markdown text: one line, markdown and HTML characters escaped, and control
    characters (a kernel name's terminal escapes, a bidi override) shown as their escapes: report.md is
    read with ``cat`` as often as rendered."""
    if value is None or value is pd.NA or (isinstance(value, float) and pd.isna(value)):
        return "–"
    if isinstance(value, float):
        return f"{int(value):,}" if value.is_integer() else f"{value:,.3f}"
    return printable(" ".join(str(value).split())).translate(MD_SPECIAL)


def code(value: object) -> str:
    """``value`` as an inline code span (backticks inside it replaced, one line, control characters as
    their escapes)."""
    return "`" + printable(" ".join(str(value).split())).replace("`", "'") + "`"


def table(frame: pd.DataFrame, columns: list[str], limit: int = 20) -> str:
    """A markdown table of ``columns`` (those present) of the first ``limit`` rows."""
    columns = [c for c in columns if c in frame.columns]
    if frame.empty or not columns:
        return "_no rows_\n"
    head = "| " + " | ".join(cell(c) for c in columns) + " |\n|" + "---|" * len(columns) + "\n"
    body = "".join(
        "| " + " | ".join(cell(v) for v in row) + " |\n" for row in frame[columns].head(limit).itertuples(index=False)
    )
    more = f"\n_{len(frame) - limit} more rows in the CSV_\n" if len(frame) > limit else ""
    return head + body + more


def share_text(value: float | None) -> str:
    """A share of the step as people read it: "12.5 %" ("–" where unknown)."""
    return "–" if value is None else f"{100 * value:.1f} %"


def ms_text(value: float) -> str:
    """A time in ms as people read it: three significant digits, never an exponent (2,846; 28.5; 2.85;
    0.285; "<0.001" below a microsecond) — ``:.3g`` printed a 2.8 s saving as "2.85e+03"."""
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}" if magnitude >= 0.001 or magnitude == 0 else "<0.001"
