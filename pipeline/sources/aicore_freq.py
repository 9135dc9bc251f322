"""AI Core frequency samples of one rank: the profiler db's ``AICORE_FREQ`` table, or the
``AI Core Freq`` counter events (``"ph": "C"``, an ``MHz`` argument) of ``trace_view.json``.

A sample holds from its time until the next one (the device reports a change, not a level per
kernel). The trace can be GBs and holds a few hundred counter events among millions: it is memory
mapped and searched for the counter's name (C speed, bounded memory), and only the objects around
each hit are parsed. Samples that cannot be read are counted, never guessed.
"""

from __future__ import annotations

import json
import mmap
import os
import sqlite3
from decimal import Decimal, InvalidOperation
from pathlib import Path

import pandas as pd

from npuprof.pipeline.errors import BadInput
from npuprof.pipeline.input_files import open_input
from npuprof.pipeline.sources.profiler_db import connect_readonly, table_names

COUNTER_NAME = b'"AI Core Freq"'
OBJECT_REACH = 4096  # bytes searched either side of a hit for the enclosing event object
COLUMNS = ["timestamp_ns", "freq_mhz", "source_row"]


def empty_samples() -> pd.DataFrame:
    """No samples, with the declared columns."""
    return pd.DataFrame({"timestamp_ns": pd.Series(dtype="int64"), "freq_mhz": [], "source_row": []}).astype(
        {"freq_mhz": "float64", "source_row": "int64"}
    )


def _ns(value: object) -> int | None:
    """A trace time in µs (decimal text or a number) as int ns, exactly for text."""
    try:
        micros = Decimal(str(value).strip())
    except InvalidOperation:
        return None
    return int(micros * 1000) if micros.is_finite() and micros >= 0 else None


def _object_around(data: mmap.mmap, hit: int) -> bytes | None:
    """The JSON object that encloses the byte at ``hit`` (braces matched outward), or None."""
    depth, start = 0, None
    for pos in range(hit, max(hit - OBJECT_REACH, -1), -1):  # a loop over at most OBJECT_REACH bytes
        char = data[pos]
        if char == ord("}"):
            depth += 1
        elif char == ord("{"):
            if depth == 0:
                start = pos
                break
            depth -= 1
    if start is None:
        return None
    depth = 0
    for pos in range(start, min(start + OBJECT_REACH, len(data))):  # a loop over at most OBJECT_REACH bytes
        char = data[pos]
        depth += 1 if char == ord("{") else -1 if char == ord("}") else 0
        if depth == 0:
            return data[start : pos + 1]
    return None


def read_trace_freq(path: Path) -> tuple[pd.DataFrame, int]:
    """Counter samples of ``trace_view.json``: (samples, how many counter hits could not be read)."""
    samples, unreadable = [], 0
    with open_input(path) as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            return empty_samples(), 0
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            hit = data.find(COUNTER_NAME)
            while hit >= 0:  # a loop over counter-name hits (a few hundred in a GB trace)
                text = _object_around(data, hit)
                try:
                    event = json.loads(text) if text is not None else None
                except (ValueError, UnicodeDecodeError):
                    event = None
                if isinstance(event, dict) and event.get("ph") == "C" and event.get("name") == "AI Core Freq":
                    args = event.get("args") if isinstance(event.get("args"), dict) else {}
                    mhz, ns = args.get("MHz"), _ns(event.get("ts"))
                    if isinstance(mhz, (int, float)) and not isinstance(mhz, bool) and mhz > 0 and ns is not None:
                        samples.append((ns, float(mhz), hit))
                    else:
                        unreadable += 1
                elif event is None:
                    unreadable += 1
                hit = data.find(COUNTER_NAME, hit + len(COUNTER_NAME))
    if not samples:
        return empty_samples(), unreadable
    frame = pd.DataFrame(samples, columns=COLUMNS)
    return frame.sort_values("timestamp_ns", kind="stable").reset_index(drop=True), unreadable


def read_db_freq(path: Path) -> pd.DataFrame | None:
    """``AICORE_FREQ`` rows of a profiler db (rowid as the source row), or None without the table."""
    with connect_readonly(path) as con:
        if "AICORE_FREQ" not in table_names(con):
            return None
        rows = con.execute("SELECT rowid, timestampNs, freq FROM AICORE_FREQ").fetchall()
    frame = pd.DataFrame(rows, columns=["source_row", "timestamp_ns", "freq_mhz"])
    numeric = pd.to_numeric(frame["timestamp_ns"], errors="coerce"), pd.to_numeric(frame["freq_mhz"], errors="coerce")
    frame = frame.assign(timestamp_ns=numeric[0], freq_mhz=numeric[1]).dropna()
    frame = frame[(frame["freq_mhz"] > 0) & (frame["timestamp_ns"] >= 0)]
    frame = frame.astype({"timestamp_ns": "int64", "freq_mhz": "float64", "source_row": "int64"})
    return frame[COLUMNS].sort_values("timestamp_ns", kind="stable").reset_index(drop=True)


def read_aicore_freq(
    profiler_db: str | None, trace_view: str | None
) -> tuple[pd.DataFrame, str | None, list[tuple[str, str, str]]]:
    """(samples, the path they came from, the files not (wholly) read: path, why, what was done
    instead): the db's table first, else the trace's counters."""
    unreadable_files: list[tuple[str, str, str]] = []
    unknown = "AI Core frequency unknown for this rank (no throttling finding)"
    if profiler_db:
        try:
            found = read_db_freq(Path(profiler_db))
        except sqlite3.Error as exc:
            found = None
            unreadable_files.append((profiler_db, f"its AICORE_FREQ table: {exc}", unknown))
        if found is not None and len(found):
            return found, profiler_db, unreadable_files
    if trace_view:
        try:
            samples, unreadable = read_trace_freq(Path(trace_view))
        except (OSError, ValueError, BadInput) as exc:  # gone since discovery, refused: auxiliary
            reason = exc.reason if isinstance(exc, BadInput) else exc
            unreadable_files.append((trace_view, f"its AI Core Freq counters: {reason}", unknown))
            return empty_samples(), None, unreadable_files
        if unreadable:
            what = f"{unreadable} AI Core Freq counter events could not be read"
            unreadable_files.append((trace_view, what, "the frequency is read from the other samples"))
        if len(samples):
            return samples, trace_view, unreadable_files
    return empty_samples(), None, unreadable_files
