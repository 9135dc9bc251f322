"""Reader of kernel_details.csv (every real header variant) and msprof op_summary_*.csv.

Variants handled (shared/spec/input-formats.md §2.5, shared/samples/README.md): 7 / 8 / 32 / 33 /
46 / 47 columns; ``Block Dim`` vs ``Block Num``; ``Step Id`` / ``Step ID``; op_summary's
``Op Name / OP Type / Task Type / Task Duration(us)``; a TAB after Start Time; ``N/A``; quoted
shapes; UTF-8 BOM; CRLF. The file is read once by Arrow's multi-threaded CSV reader with every
column as text, then converted column by column, so a bad cell is reported with its line.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from npuprof.pipeline.errors import BadInput
from npuprof.pipeline.input_files import descriptor_path, open_input
from npuprof.pipeline.sources import columns as conv

# canonical field -> (header aliases, conversion). First alias present in the header wins.
CSV_FIELDS: dict[str, tuple[tuple[str, ...], str]] = {
    "step_id": (("Step Id", "Step ID", "Step"), "int"),
    "device_id": (("Device_id", "Device Id", "Device ID"), "int"),
    "model_id": (("Model ID", "Model Id"), "int"),
    "task_id": (("Task ID", "Task Id"), "int"),
    "stream_id": (("Stream ID", "Stream Id"), "int"),
    "name": (("Name", "Op Name", "Kernel Name"), "text"),
    "type": (("Type", "OP Type", "Op Type"), "text"),
    "op_state": (("OP State",), "text"),
    "accelerator_core": (("Accelerator Core", "Task Type", "Core Type"), "text"),
    "start_ns": (("Start Time(us)", "Task Start Time(us)"), "time"),
    "duration_ns": (("Duration(us)", "Task Duration(us)"), "duration"),
    "wait_ns": (("Wait Time(us)", "Task Wait Time(us)"), "duration"),
    "block_dim": (("Block Dim", "Block Num"), "int"),
    "mix_block_dim": (("Mix Block Dim", "Mix Block Num"), "int"),
    "hf32_eligible": (("HF32 Eligible",), "text"),
    "input_shapes": (("Input Shapes",), "shape"),
    "input_dtypes": (("Input Data Types",), "text"),
    "input_formats": (("Input Formats",), "text"),
    "output_shapes": (("Output Shapes",), "shape"),
    "output_dtypes": (("Output Data Types",), "text"),
    "output_formats": (("Output Formats",), "text"),
    "context_id": (("Context ID",), "int"),
    "aicore_time_us": (("aicore_time(us)", "AI Core Time(us)"), "float"),
    "aiv_time_us": (("aiv_time(us)", "AI Vector Core Time(us)", "AI Vector Time(us)"), "float"),
    "aic_mac_time_us": (("aic_mac_time(us)",), "float"),
    "aic_fixpipe_time_us": (("aic_fixpipe_time(us)",), "float"),
    "aic_mte1_time_us": (("aic_mte1_time(us)",), "float"),
    "aic_mte2_time_us": (("aic_mte2_time(us)",), "float"),
    "aic_scalar_time_us": (("aic_scalar_time(us)",), "float"),
    "aiv_vec_time_us": (("aiv_vec_time(us)",), "float"),
    "aiv_mte2_time_us": (("aiv_mte2_time(us)",), "float"),
    "aiv_mte3_time_us": (("aiv_mte3_time(us)",), "float"),
    "aiv_scalar_time_us": (("aiv_scalar_time(us)",), "float"),
    "aic_total_cycles": (("aic_total_cycles",), "int"),
    "aiv_total_cycles": (("aiv_total_cycles",), "int"),
    "cube_utilization_pct": (("cube_utilization(%)",), "float"),
}

REQUIRED_FIELDS = ("name", "start_ns", "duration_ns")

# Invalid ids CANN writes for "none" (UINT32 max); they become null.
_INVALID_ID = 4294967295
_ID_FIELDS = ("model_id", "context_id", "task_id", "stream_id")


# A few malformed interior rows (real MindStudio samples have one) are quarantined and reported;
# more than this share of the rows means the file is broken, not the row.
MAX_QUARANTINE_SHARE = 0.01
MAX_QUARANTINE_ROWS = 100
# Arrow reads in 1 MiB blocks and refuses a row that straddles two; real rows are a few KiB.
MAX_ROW_BYTES = 1 << 20


def _key(header_name: str) -> str:
    return " ".join(header_name.strip().lower().split())


def read_header(path: Path) -> list[str]:
    """The header row of a CSV (BOM and CRLF tolerated); BadInput if empty or not UTF-8."""
    try:
        with open_input(path) as handle:
            first = handle.read(MAX_ROW_BYTES)
    except OSError as exc:
        raise BadInput(path, f"cannot read file: {exc.strerror or exc}") from None
    first = re.split(rb"\r\n|\n|\r", first, maxsplit=1)[0]  # any line ending: LF, CRLF, or CR alone
    if not first.strip():
        raise BadInput(path, "empty file (no header row)")
    try:
        text = first.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadInput(path, f"not UTF-8 text (byte 0x{first[exc.start]:02x} at offset {exc.start})", line=1) from None
    return [name.strip() for name in next(csv.reader(io.StringIO(text)))]


def map_header(path: Path, header: list[str]) -> dict[str, str]:
    """canonical field -> header column, for the fields this file has; BadInput if a required one is missing."""
    seen: set[str] = set()
    for name in header:
        if name and _key(name) in seen:
            raise BadInput(path, f"column {name!r} appears twice in the header: cannot tell which to read", line=1)
        seen.add(_key(name))
    by_key = {_key(h): h for h in header if h}
    mapping: dict[str, str] = {}
    for field, (aliases, _kind) in CSV_FIELDS.items():
        for alias in aliases:
            if _key(alias) in by_key:
                mapping[field] = by_key[_key(alias)]
                break
    for field in REQUIRED_FIELDS:
        if field not in mapping:
            wanted = " or ".join(repr(a) for a in CSV_FIELDS[field][0])
            raise BadInput(path, f"required column {wanted} is missing from the header", column=CSV_FIELDS[field][0][0])
    return mapping


def _locate_read_error(path: Path, header_len: int, exc: Exception) -> BadInput:
    """Find where Arrow's CSV reader failed (error path only, so a plain line scan is fine)."""
    with open_input(path) as handle:
        for lineno, raw_line in enumerate(handle, start=1):
            if len(raw_line) > MAX_ROW_BYTES:
                return BadInput(
                    path, f"a row of {len(raw_line)} bytes, longer than {MAX_ROW_BYTES} (corrupt row)", line=lineno
                )
            try:
                raw_line.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as err:
                return BadInput(
                    path, f"not UTF-8 text (byte 0x{raw_line[err.start]:02x} at column offset {err.start})", line=lineno
                )
    malformed = _malformed_lines(path, header_len)
    if malformed:
        lineno, fields = malformed[0]
        return BadInput(path, f"expected {header_len} fields, found {fields} (truncated or malformed row)", line=lineno)
    return BadInput(path, f"malformed CSV: {' '.join(str(exc).split())[:200]}")


def _malformed_lines(path: Path, header_len: int) -> list[tuple[int, int]]:
    """(line, field count) of every row whose field count differs from the header's."""
    found = []
    with open_input(path, "r", newline="", encoding="utf-8-sig", errors="replace") as handle:
        reader = csv.reader(handle)
        next(reader, None)
        for lineno, row in enumerate(reader, start=2):
            if row and len(row) != header_len:
                found.append((lineno, len(row)))
    return found


def _ends_with_newline(path: Path) -> bool:
    with open_input(path) as handle:
        handle.seek(0, 2)
        if handle.tell() == 0:
            return False
        handle.seek(-1, 2)
        return handle.read(1) in (b"\n", b"\r")


def _quarantine(path: Path, header_len: int, kept_rows: int) -> list[dict]:
    """Decide what the rows Arrow skipped mean: a truncated file fails, a few bad interior rows are reported."""
    malformed = _malformed_lines(path, header_len)
    if not malformed:
        return []
    last_line, last_fields = malformed[-1]
    total_lines = kept_rows + len(malformed) + 1
    if last_line == total_lines and not _ends_with_newline(path):
        raise BadInput(
            path, f"file is truncated: the last row has {last_fields} of {header_len} fields", line=last_line
        )
    allowed = min(MAX_QUARANTINE_ROWS, max(1, int(MAX_QUARANTINE_SHARE * (kept_rows + len(malformed)))))
    if len(malformed) > allowed:
        line, fields = malformed[0]
        raise BadInput(
            path, f"expected {header_len} fields, found {fields}; {len(malformed)} rows are malformed", line=line
        )
    return [{"line": line, "fields": fields, "expected_fields": header_len} for line, fields in malformed]


_ARROW_TYPES = {"int": pa.int64(), "float": pa.float64(), "duration": pa.float64()}


def _typed_columns(header: list[str], mapping: dict[str, str]) -> dict[str, pa.DataType]:
    types = {h: pa.string() for h in header}
    for field, column in mapping.items():
        types[column] = _ARROW_TYPES.get(CSV_FIELDS[field][1], pa.string())
    return types


def _read_raw(
    path: Path, header: list[str], wanted: list[str], column_types: dict[str, pa.DataType]
) -> tuple[pa.Table, list]:
    """Arrow's multi-threaded CSV read; rows with a wrong field count are collected, not fatal (yet)."""
    skipped: list[object] = []

    def _skip_invalid(row: object) -> str:
        skipped.append(row)
        return "skip"

    with open_input(path) as checked:  # Arrow reads the file checked, by its descriptor, at its own speed
        try:
            raw = pacsv.read_csv(
                pa.OSFile(descriptor_path(checked)),
                read_options=pacsv.ReadOptions(column_names=header, skip_rows=1),
                parse_options=pacsv.ParseOptions(newlines_in_values=False, invalid_row_handler=_skip_invalid),
                convert_options=pacsv.ConvertOptions(
                    column_types=column_types,
                    include_columns=wanted,
                    null_values=["N/A", "", "NA"],
                    strings_can_be_null=True,
                    quoted_strings_can_be_null=True,
                ),
            )
        except UnicodeDecodeError as exc:
            raise _locate_read_error(path, len(header), exc) from None
        except pa.ArrowInvalid as exc:
            if (
                "conversion error" in str(exc)
                and "UTF8" not in str(exc)
                and any(t != pa.string() for t in column_types.values())
            ):
                raise  # the caller retries as text to find the bad cell
            raise _locate_read_error(path, len(header), exc) from None
        except OSError as exc:
            raise BadInput(path, f"cannot read file: {exc.strerror or exc}") from None
    return raw, skipped


def read_kernel_csv(path: Path) -> tuple[pa.Table, dict]:
    """Read one kernel_details.csv / op_summary csv into normalized event columns.

    Returns the typed columns (no categories / op_type yet) and facts for the manifest
    (header width, which optional fields the file had, quarantined malformed rows).
    """
    path = Path(path)
    header = read_header(path)
    mapping = map_header(path, header)
    wanted = list(dict.fromkeys(mapping.values()))
    try:
        # Fast path: Arrow parses the numeric columns itself. A cell it cannot parse makes the
        # whole read fail; the slow path then reads text and reports which cell it was.
        raw, skipped = _read_raw(path, header, wanted, _typed_columns(header, mapping))
    except pa.ArrowInvalid:
        raw, skipped = _read_raw(path, header, wanted, {h: pa.string() for h in header})
    # the parse's block buffers are freed but stay resident in the allocator's per-thread arenas
    # (about as much again as the table under malloc): hand them back before the columns are converted
    pa.default_memory_pool().release_unused()
    quarantined = _quarantine(path, len(header), raw.num_rows) if skipped else []
    if raw.num_rows == 0:
        raise BadInput(path, "no data rows (the rank captured no kernels)")

    # Data row i sits on line i + 2 (header is line 1). With quarantined rows, the kept rows'
    # source indices skip them, so row_idx still points at the right line of the file.
    source_rows = np.arange(raw.num_rows + len(quarantined), dtype=np.int64)
    if quarantined:
        source_rows = np.delete(source_rows, [q["line"] - 2 for q in quarantined])

    def line_of(index: int) -> int:
        return int(source_rows[index]) + 2

    out: dict[str, pa.ChunkedArray] = {}
    for field, column in mapping.items():
        kind = CSV_FIELDS[field][1]
        values = raw.column(column)
        args = {"path": path, "column": column, "line_of": line_of}
        if kind == "text":
            out[field] = values
        elif kind == "shape":
            out[field] = conv.unquoted(values)
        elif kind == "int":
            out[field] = conv.to_int(values, **args)
        elif kind == "float":
            out[field] = conv.to_float(values, **args)
        elif kind == "time":
            out[field] = conv.decimal_us_to_ns(values, **args)
        elif kind == "duration":
            out[field] = conv.float_us_to_ns(values, **args)
    for field in REQUIRED_FIELDS:
        missing_at = pc.index(pc.is_null(out[field]), True).as_py()
        if missing_at >= 0:
            raise BadInput(path, "required cell is empty or N/A", line=line_of(missing_at), column=mapping[field])
    for field in _ID_FIELDS:
        if field in out:
            out[field] = pc.if_else(pc.equal(out[field], _INVALID_ID), pa.scalar(None, pa.int64()), out[field])
    out["row_idx"] = pa.array(source_rows)
    facts = {"header_columns": len(header), "fields_present": sorted(mapping), "quarantined_rows": quarantined}
    return pa.table(out), facts
