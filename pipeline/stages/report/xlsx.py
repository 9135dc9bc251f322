"""report/report.xlsx (full mode): a README sheet and one sheet per table.

Kernel names and paths are untrusted: a text cell is always written as text, so one that starts
with ``=``, ``+``, ``-`` or ``@`` can never become a formula, and characters Excel refuses are
dropped. Per-instance sheets are capped, with a visible ``__truncated__`` row saying how many rows
the CSV holds; class sheets stay whole. Headers are frozen, columns sized to their content, every
table filterable; numbers stay numbers, and absolute times become µs from the capture start.
"""

from __future__ import annotations

import io as _io
import math

import numpy as np
import pandas as pd
from openpyxl import Workbook
from openpyxl.cell import WriteOnlyCell
from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE
from openpyxl.styles import Font
from openpyxl.utils import get_column_letter

from npuprof.pipeline.csv_formulas import FORMULA_LEADS

EPOCH_NS_FROM = 10**18  # start times past this (2001) are wall-clock epoch times, not device counters
MAX_WIDTH = 60


def _text_cell(sheet, value: str) -> WriteOnlyCell:
    cell = WriteOnlyCell(sheet, value=ILLEGAL_CHARACTERS_RE.sub("", value))
    cell.data_type = "s"  # text, whatever it starts with: never a formula
    return cell


def _rows(sheet, frame: pd.DataFrame):
    """The frame's rows as cell values; text that could be read as a formula wrapped as text cells."""
    columns = []
    for name in frame.columns:
        values = frame[name].astype(object).where(frame[name].notna(), None).to_numpy()
        if frame[name].dtype == object or pd.api.types.is_string_dtype(frame[name]):
            texts = pd.Series(values, dtype=object)
            risky = (
                texts.map(lambda v: isinstance(v, str)).to_numpy()
                & texts.astype(str).str.startswith(tuple(FORMULA_LEADS)).to_numpy()
            )
            clean = (
                texts.astype(str).str.contains(ILLEGAL_CHARACTERS_RE.pattern, regex=True).to_numpy()
                & texts.notna().to_numpy()
            )
            wrap = risky | clean
            values = np.array(
                [_text_cell(sheet, v) if w else v for v, w in zip(values, wrap)], dtype=object
            )  # text columns only
        elif frame[name].dtype.kind == "f":
            values = np.array(
                [None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v for v in values],
                dtype=object,
            )
        columns.append(values)
    return zip(*columns) if columns else iter(())


TIME_SUFFIX = "_us_from_start"
ABSOLUTE_US = 1e12  # µs values above this are epoch timestamps (2001 on), not durations


def relative_times(frame: pd.DataFrame, base_ns: int | None) -> pd.DataFrame:
    """Absolute times as µs from the capture start (``base_ns``): ``*_ns`` columns, and ``*_us``
    columns that hold epoch µs; renamed ``<name>_us_from_start`` (an epoch-µs column whose ns twin is
    already shown is left out). A spreadsheet shows 1.76e+18 ns as nothing a person reads, and rounds it.
    Where rows start at a wall-clock moment (an epoch ``start_ns``), ``start_utc`` says when, as a date
    the spreadsheet can filter and sort (to the millisecond, Excel's precision)."""
    if base_ns is None or frame.empty:
        return frame
    out = frame.copy()
    if "start_ns" in frame and pd.api.types.is_numeric_dtype(frame["start_ns"]) and base_ns > EPOCH_NS_FROM:
        at = out.columns.get_loc("start_ns")
        out.insert(at, "start_utc", pd.to_datetime(frame["start_ns"], unit="ns").dt.floor("ms"))
    renamed: dict[str, str] = {}
    dropped = []
    numeric = [
        n for n in frame.columns if pd.api.types.is_numeric_dtype(frame[n]) and not pd.api.types.is_bool_dtype(frame[n])
    ]
    for name in numeric:  # nanosecond columns first: they are the exact ones
        if name.endswith("_ns"):
            out[name] = (frame[name] - base_ns) / 1000.0
            renamed[name] = name[: -len("_ns")] + TIME_SUFFIX
    for name in numeric:
        if name.endswith("_us") and frame[name].abs().median() > ABSOLUTE_US:
            target = name[: -len("_us")] + TIME_SUFFIX
            if target in renamed.values() or target in frame.columns:
                dropped.append(name)
            else:
                out[name] = frame[name] - base_ns / 1000.0
                renamed[name] = target
    return out.drop(columns=dropped).rename(columns=renamed)


def _sheet(
    book: Workbook, title: str, frame: pd.DataFrame, cap: int | None, csv_name: str | None, empty_reason: str
) -> None:
    sheet = book.create_sheet(title=title[:31])
    sheet.freeze_panes = "A2"
    shown = frame.head(cap) if cap else frame
    for index, column in enumerate(frame.columns, start=1):
        sample = shown[column].head(200).astype(str)
        width = max([len(str(column)), *sample.str.len().tolist()] or [8])
        sheet.column_dimensions[get_column_letter(index)].width = min(max(width + 2, 8), MAX_WIDTH)
    header = []
    for name in frame.columns:
        cell = _text_cell(sheet, str(name))
        cell.font = Font(bold=True)
        header.append(cell)
    sheet.append(header)
    for row in _rows(sheet, shown):
        sheet.append(list(row))
    if len(frame.columns):
        sheet.auto_filter.ref = f"A1:{get_column_letter(len(frame.columns))}{max(len(shown), 1) + 1}"
    if frame.empty:
        sheet.append([_text_cell(sheet, "(no rows)"), _text_cell(sheet, empty_reason)])
    if cap and len(frame) > cap:
        where = f"all {len(frame)} rows are in {csv_name}" if csv_name else f"{len(frame)} rows in all"
        sheet.append([_text_cell(sheet, "__truncated__"), _text_cell(sheet, f"first {cap} rows shown; {where}")])


def workbook(
    readme: list[tuple[str, str]], sheets: list[tuple[str, pd.DataFrame, int | None, str | None, str]]
) -> bytes:
    """The workbook: README (sheet → what it holds) then each (title, frame, cap, csv file, why it
    may be empty)."""
    book = Workbook(write_only=True)
    about = book.create_sheet(title="README")
    about.append([_text_cell(about, "sheet"), _text_cell(about, "what it holds")])
    for name, text in readme:
        about.append([_text_cell(about, name), _text_cell(about, text)])
    for title, frame, cap, csv_name, empty_reason in sheets:
        _sheet(book, title, frame, cap, csv_name, empty_reason)
    buffer = _io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()
