"""Reader of profiler sqlite exports: ``ascend_pytorch_profiler_<rank>.db`` and ``msprof_<n>.db``.

The db is opened read-only **and** immutable (``?mode=ro&immutable=1``): some real dbs are in WAL
mode, and without ``immutable`` sqlite creates ``-shm``/``-wal`` files beside them, i.e. it writes
into the user's archive. Column names differ between schema versions (1.0.0 in the public samples,
1.2.0 in newer CANN); ``knowledge/db_source_mapping.yaml`` says which db column feeds which
normalized column. Rows are rebuilt as kernel_details.csv would list them: one per
COMPUTE_TASK_INFO ⋈ TASK row plus one per COMMUNICATION_OP, ordered by start time.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO
from urllib.parse import quote

import numpy as np
import pandas as pd
import pyarrow as pa

from npuprof import knowledge
from npuprof.pipeline.errors import BadInput
from npuprof.pipeline.input_files import descriptor_path, open_input
from npuprof.pipeline.sources.columns import MAX_TIMESTAMP_US
from npuprof.pipeline.sources.integrity import repeated_rows


@dataclass
class DbProbe:
    """Whether a db can be read, and why not when it cannot."""

    path: Path
    ok: bool
    reason: str = ""
    schema_version: str | None = None
    tables: dict[str, list[str]] = field(default_factory=dict)


# A db copied while its writer was open keeps committed rows in ``-wal`` (or a half-done
# transaction in ``-journal``) beside it. Opening the db immutable ignores them and would lose or
# corrupt rows; opening it normally would write ``-shm`` into the user's archive. So the db and
# its side file are copied to a private temp dir once per process, and sqlite recovers the copy.
_SIDE_FILES = ("-wal", "-journal")
SPARSE_MIN_BYTES = 64 << 20
# the tables whose text columns the reader resolves through STRING_IDS, one copy per row
STRING_ID_TABLES = ("COMPUTE_TASK_INFO", "COMMUNICATION_OP")  # below this a copy costs nothing worth refusing
_snapshots: dict[tuple[str, int, int], Path] = {}
_snapshot_root: tempfile.TemporaryDirectory | None = None


def pending_side_files(path: Path) -> list[Path]:
    """The non-empty ``-wal`` / ``-journal`` files beside a db: changes not yet in the db file."""
    found = []
    for suffix in _SIDE_FILES:
        side = Path(f"{path}{suffix}")
        if side.is_file() and side.stat().st_size > 0:
            found.append(side)
    return found


def _require_copyable(path: Path, info: os.stat_result, scratch: Path) -> None:
    """Refuse, before a byte is copied, a db whose copy would fill the temp dir: one mostly holes (a sparse
    file's apparent size is no export's: 5 GiB of nothing would be written out in full), or larger than
    the temp dir's free space."""
    on_disk = info.st_blocks * 512
    if info.st_size > SPARSE_MIN_BYTES and on_disk < info.st_size / 2:
        raise BadInput(path, f"a sparse file ({info.st_size:,} bytes long, {on_disk:,} on disk): not a profiler db")
    free = shutil.disk_usage(scratch).free
    if info.st_size > free:
        need = f"its -wal / -journal needs a private copy of {info.st_size:,} bytes"
        raise BadInput(path, f"{need}; {scratch} has {free:,} free")


def _snapshot(path: Path, side_files: list[Path]) -> Path:
    """A private, recovered copy of ``path`` with its side files applied (cached per process)."""
    global _snapshot_root
    info = path.stat()
    key = (str(path.resolve()), info.st_size, info.st_mtime_ns)
    if key in _snapshots and _snapshots[key].exists():
        return _snapshots[key]
    if _snapshot_root is None:
        _snapshot_root = tempfile.TemporaryDirectory(prefix="npuprof-db-")
    _require_copyable(path, info, Path(_snapshot_root.name))
    target_dir = Path(tempfile.mkdtemp(dir=_snapshot_root.name))
    copy = target_dir / path.name
    for source, name in [(path, path.name), *((side, path.name + side.name[len(path.name) :]) for side in side_files)]:
        with open_input(source) as checked, open(target_dir / name, "xb") as written:
            shutil.copyfileobj(checked, written, COPY_CHUNK)
    with sqlite3.connect(copy) as con:  # our copy: sqlite may roll back a journal / read the WAL
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        if any(side.name.endswith("-wal") for side in side_files):
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    _snapshots[key] = copy
    return copy


def snapshot_note(path: Path) -> str | None:
    """What a manifest says when a db was read through a recovered private copy."""
    sides = pending_side_files(path)
    if not sides:
        return None
    names = ", ".join(side.name for side in sides)
    return f"{Path(path).name}: {names} beside it holds changes not yet in the db file; read a recovered private copy"


COPY_CHUNK = 16 << 20


class CheckedConnection(sqlite3.Connection):
    """A read-only connection holding the descriptor of the file it was checked to open."""

    source: IO | None = None


def connect_readonly(path: Path) -> sqlite3.Connection:
    """Open ``path`` read-only and immutable, so nothing is ever written beside it (a db with a
    pending ``-wal`` / ``-journal`` is read through a recovered private copy)."""
    path = Path(path)
    sides = pending_side_files(path)
    target = _snapshot(path, sides) if sides else path
    try:
        checked = open_input(target)  # sqlite opens the checked file, by its descriptor's path
    except BadInput as exc:  # as sqlite says it: every reader of a db handles an unreadable one
        raise sqlite3.OperationalError(f"unable to open database file: {exc.reason}") from None
    uri = f"file:{quote(os.fsencode(descriptor_path(checked)))}?mode=ro&immutable=1"
    con = sqlite3.connect(uri, uri=True, factory=CheckedConnection)
    con.source = checked
    return con


def table_names(con: sqlite3.Connection) -> set[str]:
    """The tables of an open db (its sqlite_master)."""
    return {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _table_columns(con: sqlite3.Connection) -> dict[str, list[str]]:
    names = sorted(table_names(con))
    # a bound parameter, never a name pasted into SQL: table names are data (one may hold a quote)
    return {name: [col[0] for col in con.execute("SELECT name FROM pragma_table_info(?)", (name,))] for name in names}


def probe(path: Path) -> DbProbe:
    """Check that ``path`` is a profiler db of a schema we read; never raises for a bad db."""
    mapping = knowledge.load("db_source_mapping")
    path = Path(path)
    try:
        with connect_readonly(path) as con:
            tables = _table_columns(con)
            version = None
            if "META_DATA" in tables:
                row = con.execute("SELECT value FROM META_DATA WHERE name = 'SCHEMA_VERSION'").fetchone()
                version = row[0] if row else None
    except sqlite3.Error as exc:
        return DbProbe(path, False, f"not a readable sqlite db ({exc})")
    except BadInput as exc:  # its recovered copy was refused (a sparse file, no room for it)
        return DbProbe(path, False, exc.reason)
    for table, required in mapping["required_columns"].items():
        if table not in tables:
            return DbProbe(
                path, False, f"table {table} is missing (not a profiler db of a known schema)", version, tables
            )
        missing = [c for c in required if c not in tables[table]]
        if missing:
            return DbProbe(path, False, f"table {table} lacks columns {', '.join(missing)}", version, tables)
    if version is not None:
        major = str(version).split(".")[0]
        if not major.isdigit() or int(major) not in mapping["supported_schema_majors"]:
            return DbProbe(path, False, f"SCHEMA_VERSION {version} is not supported", version, tables)
    return DbProbe(path, True, "", version, tables)


# characters of one STRING_IDS value that are read: real exports' longest are ~300 (a fused op's shapes);
# a db stores a string once but every row naming it gets its own copy, so one huge value would be
# multiplied by the rows (a 2 MiB value in a 2.3 MB db: 5.8 GB)
DB_TEXT_CAP = 8192


def _long_strings_note(cut: int) -> str | None:
    """A note when ``cut`` STRING_IDS values were longer than DB_TEXT_CAP (they are read cut)."""
    if not cut:
        return None
    return (
        f"{cut} STRING_IDS values longer than {DB_TEXT_CAP} characters read cut to their first {DB_TEXT_CAP} "
        "(no profiler writes one that long)"
    )


def repeated_text_bytes(path: str | Path) -> int:
    """Bytes of STRING_IDS text the reader will materialise for STRING_ID_TABLES (each row its own copy
    of each string it names, cut at DB_TEXT_CAP): what a db holds once but memory holds per row. 0 when
    the db has no such tables (the reader says what is wrong)."""
    try:
        with connect_readonly(Path(path)) as con:
            tables = _table_columns(con)
            wanted = knowledge.load("db_source_mapping")["string_id_columns"]
            if "STRING_IDS" not in tables:
                return 0
            lengths = dict(con.execute(f"SELECT id, min(length(value), {DB_TEXT_CAP}) FROM STRING_IDS").fetchall())
            total = 0
            for table in STRING_ID_TABLES:  # a kernel's or a collective's every named column
                columns = [c for c in wanted if c in tables.get(table, []) and c.isidentifier()]
                for column in columns:  # rows per id, then each id's length once: no long value read per row
                    counts = con.execute(f"SELECT {column}, count(*) FROM {table} GROUP BY {column}").fetchall()
                    total += sum((lengths.get(value) or 0) * count for value, count in counts)
            return int(total)
    except sqlite3.Error:
        return 0


def _first_present(candidates: list[str], columns: list[str]) -> str | None:
    return next((c for c in candidates if c in columns), None)


def _select_list(alias: str, wanted: dict[str, list[str]], columns: list[str]) -> list[str]:
    """SELECT items for the wanted normalized fields; a STRING_IDS column is selected as its id (resolved
    by ``resolve_strings`` after the read)."""
    items = []
    for out_name, candidates in wanted.items():
        src = _first_present(candidates, columns)
        if src is not None:
            items.append(f"{alias}.{src} AS {out_name}")
    return items


def string_values(con: sqlite3.Connection) -> tuple[pd.Series, int]:
    """Every STRING_IDS value (cut at DB_TEXT_CAP) by id, each read once: rows that name one string share
    it instead of each getting a copy (the first of an id stored twice); and how many were cut."""
    frame = pd.read_sql_query(
        f"SELECT id, substr(value, 1, {DB_TEXT_CAP}) AS value, length(value) > {DB_TEXT_CAP} AS cut FROM STRING_IDS",
        con,
    )
    cut = int(frame["cut"].fillna(0).sum())
    frame = frame.drop_duplicates("id")
    return pd.Series(frame["value"].to_numpy(object), index=frame["id"].to_numpy()), cut


def resolve_strings(frame: pd.DataFrame, columns: list[str], strings: pd.Series) -> None:
    """Replace the STRING_IDS ids in ``columns`` of ``frame`` by their values (null for an unknown id)."""
    for column in columns:
        if column in frame:
            values = frame[column].map(strings)
            # as the rows of a LEFT JOIN read: text, or None throughout where no row names a string
            frame[column] = values.astype("str") if values.notna().any() else pd.Series(None, frame.index, object)


def _string_outputs(wanted: dict[str, list[str]], columns: list[str], string_ids: set[str]) -> list[str]:
    """The normalized fields of ``wanted`` whose db column holds STRING_IDS ids."""
    return [out for out, candidates in wanted.items() if _first_present(candidates, columns) in string_ids]


def _read_compute(
    con: sqlite3.Connection, tables: dict[str, list[str]], mapping: dict, strings: pd.Series
) -> pd.DataFrame:
    string_ids = set(mapping["string_id_columns"])
    compute = {"name": ["name"], "accelerator_core": ["taskType"], **mapping["compute_columns"]}
    items = ["c.rowid AS pmu_key", "c.globalTaskId AS source_row_key", "t.startNs AS start_ns", "t.endNs AS end_ns"]
    items += _select_list("c", compute, tables["COMPUTE_TASK_INFO"])
    items += _select_list("t", mapping["task_columns"], tables["TASK"])
    sql = f"SELECT {', '.join(items)} FROM COMPUTE_TASK_INFO c JOIN TASK t ON t.globalTaskId = c.globalTaskId"
    frame = pd.read_sql_query(sql, con)
    resolve_strings(frame, _string_outputs(compute, tables["COMPUTE_TASK_INFO"], string_ids), strings)
    return frame


def _read_communication(
    con: sqlite3.Connection, tables: dict[str, list[str]], mapping: dict, strings: pd.Series
) -> pd.DataFrame:
    columns = tables.get("COMMUNICATION_OP", [])
    if not {"opName", "startNs", "endNs"} <= set(columns):
        return pd.DataFrame()
    string_ids = set(mapping["string_id_columns"])
    wanted = {"name": ["opName"], **mapping["communication_columns"]}
    items = ["o.startNs AS start_ns", "o.endNs AS end_ns"]
    if "opId" in columns:
        items.append("o.opId AS source_row_key")
    items += _select_list("o", wanted, columns)
    frame = pd.read_sql_query(f"SELECT {', '.join(items)} FROM COMMUNICATION_OP o", con)
    resolve_strings(frame, _string_outputs(wanted, columns, string_ids), strings)
    frame["accelerator_core"] = mapping["communication_core"]
    return frame


def _read_pmu(con: sqlite3.Connection, tables: dict[str, list[str]], mapping: dict) -> pd.DataFrame:
    if "TASK_PMU_INFO" not in tables:
        return pd.DataFrame()
    metrics = mapping["pmu_metrics"]
    ids = dict(
        con.execute(
            f"SELECT value, id FROM STRING_IDS WHERE value IN ({', '.join('?' * len(metrics))})", list(metrics)
        ).fetchall()
    )
    present = {name: spec for name, spec in metrics.items() if name in ids}
    if not present:
        return pd.DataFrame()
    # Pivot the long (task, metric, value) table inside sqlite: one row per task, one column per metric.
    cases = ", ".join(
        f"MAX(CASE WHEN name = {int(ids[name])} THEN value END) * {float(spec['scale'])} AS {spec['column']}"
        for name, spec in present.items()
    )
    return pd.read_sql_query(f"SELECT globalTaskId AS pmu_key, {cases} FROM TASK_PMU_INFO GROUP BY globalTaskId", con)


def _step_ids(con: sqlite3.Connection, tables: dict[str, list[str]], start_ns: np.ndarray) -> np.ndarray | None:
    """Step of each row from STEP_TIME (the ProfilerStep#n spans); null outside every step."""
    if "STEP_TIME" not in tables:
        return None
    steps = pd.read_sql_query("SELECT id, startNs, endNs FROM STEP_TIME ORDER BY startNs", con)
    if steps.empty:
        return None
    starts = steps["startNs"].to_numpy(dtype=np.int64)
    ends = steps["endNs"].to_numpy(dtype=np.int64)
    pos = np.searchsorted(starts, start_ns, side="right") - 1
    inside = (pos >= 0) & (start_ns <= ends[np.clip(pos, 0, None)])
    result = np.full(len(start_ns), np.nan)
    result[inside] = steps["id"].to_numpy(dtype=np.float64)[pos[inside]]
    return result


def _fill_wait_ns(events: pd.DataFrame) -> list[str]:
    """wait_ns from the db where it has one, else the gap to the previous task's end; the notes say which."""
    derived_wait = _derived_wait_ns(events)
    if "wait_ns" not in events:
        events["wait_ns"] = derived_wait
        return ["db stores no wait time: wait_ns is the gap to the previous task's end"]
    missing = events["wait_ns"].isna()
    events["wait_ns"] = events["wait_ns"].fillna(pd.Series(derived_wait, index=events.index))
    if missing.any():
        return [f"wait_ns derived from the gap to the previous task for {int(missing.sum())} rows"]
    return []


_NA_TEXT_COLUMNS = (
    "type",
    "accelerator_core",
    "op_state",
    "hf32_eligible",
    "input_dtypes",
    "input_formats",
    "output_dtypes",
    "output_formats",
)
_INVALID_ID = 4294967295  # the db's "no id" (uint32 max)


def _clean_text_and_ids(events: pd.DataFrame) -> None:
    """Quotes out of shapes, ``N/A`` text and the db's invalid id to null (as the CSV reader does)."""
    for text_col in ("input_shapes", "output_shapes"):
        if text_col in events:
            events[text_col] = events[text_col].str.replace('"', "", regex=False)
    for text_col in _NA_TEXT_COLUMNS:
        if text_col in events:
            events[text_col] = events[text_col].where(events[text_col] != "N/A")
    for id_col in ("context_id", "model_id", "task_id", "stream_id"):
        if id_col in events:
            events[id_col] = events[id_col].where(events[id_col] != _INVALID_ID)


_TIME_COLUMNS = {"TASK": "globalTaskId", "COMMUNICATION_OP": "opId"}


def _check_time_types(con: sqlite3.Connection, path: Path, tables: dict[str, list[str]]) -> None:
    """Every start / end time is an integer (sqlite stores whatever it is given: text, reals, NULL)."""
    for table, key in _TIME_COLUMNS.items():
        columns = tables.get(table, [])
        if not {"startNs", "endNs"} <= set(columns):
            continue
        key_sql = key if key in columns else "rowid"
        for column in ("startNs", "endNs"):
            bad = con.execute(
                f"SELECT {key_sql}, {column}, typeof({column}) FROM {table} WHERE typeof({column}) != 'integer' LIMIT 1"
            ).fetchone()
            if bad is not None:
                raise BadInput(path, f"{table}.{column} is not an integer time: {bad[1]!r} ({bad[2]})", row=bad[0])


def _check_event_values(events: pd.DataFrame, path: Path) -> None:
    """Times in range, no task ending before it starts, every kernel named."""
    start, end = events["start_ns"].to_numpy(), events["end_ns"].to_numpy()
    checks = (
        (start < 0, "negative start time"),
        (start > MAX_TIMESTAMP_US * 1000, "start time out of range"),
        (end < start, "the task ends before it starts"),
        (events["name"].isna().to_numpy() | (events["name"] == "").to_numpy(), "empty kernel name (STRING_IDS)"),
    )
    for mask, what in checks:
        if mask.any():
            first = int(np.flatnonzero(mask)[0])
            key = events["source_row_key"].iloc[first] if "source_row_key" in events else None
            raise BadInput(path, what, row=None if pd.isna(key) else int(key))


def read_profiler_db(path: Path) -> tuple[pa.Table, dict]:
    """Read one profiler db into normalized event columns (no categories / op_type yet)."""
    path = Path(path)
    checked = probe(path)
    if not checked.ok:
        raise BadInput(path, f"cannot read profiler db: {checked.reason}")
    mapping = knowledge.load("db_source_mapping")
    notes: list[str] = [note for note in (snapshot_note(path),) if note]
    try:
        with connect_readonly(path) as con:
            _check_time_types(con, path, checked.tables)
            strings, cut = string_values(con)
            notes += [note for note in (_long_strings_note(cut),) if note]
            compute = _read_compute(con, checked.tables, mapping, strings)
            pmu = _read_pmu(con, checked.tables, mapping)
            communication = _read_communication(con, checked.tables, mapping, strings)
            if not pmu.empty:
                compute = compute.merge(pmu, on="pmu_key", how="left")
            else:
                notes.append("no TASK_PMU_INFO: pipeline fields are null")
            compute = compute.drop(columns="pmu_key")
            compute["kind_order"] = 0
            if not communication.empty:
                communication["kind_order"] = 1
            events = pd.concat([compute, communication], ignore_index=True) if not communication.empty else compute
            if events.empty:
                raise BadInput(path, "no compute or communication rows (the rank captured no kernels)")
            _check_event_values(events, path)
            repeated = repeated_rows(events)
            if repeated.any():  # a TASK row stored twice fans the join out: one event, not two
                events = events.loc[~repeated]
                notes.append(f"{int(repeated.sum())} duplicate rows dropped (identical to an earlier row of the db)")
            events = events.sort_values(
                ["start_ns", "kind_order"] + [c for c in ("task_id", "source_row_key") if c in events],
                kind="stable",
            ).reset_index(drop=True)
            steps = _step_ids(con, checked.tables, events["start_ns"].to_numpy(dtype=np.int64))
    except (sqlite3.Error, pd.errors.DatabaseError) as exc:  # pandas wraps what sqlite raises in a query
        raise BadInput(path, f"sqlite error while reading: {exc}") from None

    events["duration_ns"] = events["end_ns"] - events["start_ns"]
    if steps is not None:
        events["step_id"] = pd.array(steps, dtype="Int64")
    notes += _fill_wait_ns(events)
    _clean_text_and_ids(events)
    events["row_idx"] = np.arange(len(events), dtype=np.int64)
    events = events.drop(columns="kind_order")
    facts = {
        "schema_version": checked.schema_version,
        "compute_rows": int((events["accelerator_core"] != mapping["communication_core"]).sum()) if len(events) else 0,
        "communication_rows": int(len(communication)),
        "notes": notes,
    }
    return pa.Table.from_pandas(events, preserve_index=False), facts


def _derived_wait_ns(events: pd.DataFrame) -> np.ndarray:
    """Idle gap before each task: its start minus the latest end of any earlier task (≥ 0)."""
    ends = events["end_ns"].to_numpy(dtype=np.int64)
    starts = events["start_ns"].to_numpy(dtype=np.int64)
    previous_end = np.maximum.accumulate(ends)
    gap = np.zeros(len(starts), dtype=np.int64)
    gap[1:] = starts[1:] - previous_end[:-1]
    return np.clip(gap, 0, None)
