"""A corpus of bad and odd profiling roots, each built from the real samples with one thing wrong.

Every case builds its root under a temp dir and says what npuprof must do with it: fail with a
documented exit code and one stderr line that names the file (and the line, where it applies), or
analyze it and keep every row (or count what it dropped). ``test_badinputs.py`` runs the real CLI
on each and checks the failure contract; the cases read as the list of what a careful tester of
profilers would try.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from conftest import PYTORCH_DATA, copy_sample

TEXT_ROOT = PYTORCH_DATA / "text" / "level0"  # 2 ranks, 8-column kernel_details.csv, 191 rows each
DB_ROOT = PYTORCH_DATA / "db" / "level0"  # 2 ranks, profiler dbs of schema 1.0.0
RANK0 = "rank0_ascend_pt"
KERNELS = f"{RANK0}/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
DB0 = f"{RANK0}/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"
TEXT_ROWS = 191
DB_EVENTS = 382  # both ranks of DB_ROOT
LINE5_NAME = b"trans_TransData_2"  # the kernel on line 5 of rank 0

EXIT_OK, EXIT_USAGE, EXIT_BAD_INPUT, EXIT_MANIFEST, EXIT_DEGRADED = 0, 2, 3, 4, 8


@dataclass
class Case:
    """One bad or odd root and what npuprof must do with it."""

    name: str
    build: Callable[[Path], Path]  # tmp dir -> the path given to `npuprof analyze`
    exit_code: int
    says: str  # in the one-line error (failures) or in the result's notes / warnings (valid data)
    names: str | None = None  # the file (path suffix) the error line names
    line: int | None = None  # the line it names, where one applies
    events: int | None = None  # valid data: the events kept
    extra_args: tuple[str, ...] = ()
    out: Callable[[Path, Path], Path] | None = None  # (tmp, root) -> OUT, for output-dir cases
    phase: str | None = None
    tags: set[str] = field(default_factory=set)


def text_root(tmp: Path) -> Path:
    return copy_sample(TEXT_ROOT, tmp / "root")


def db_root(tmp: Path) -> Path:
    return copy_sample(DB_ROOT, tmp / "root")


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")


def set_cell(column: str, value: str, line: int = 5) -> Callable[[Path], Path]:
    """A text root whose rank-0 kernel_details.csv has ``value`` in ``column`` on ``line``."""

    def build(tmp: Path) -> Path:
        root = text_root(tmp)
        path = root / KERNELS
        rows = lines_of(path)
        header = rows[0].split(",")
        cells = rows[line - 1].split(",")
        cells[header.index(column)] = value
        rows[line - 1] = ",".join(cells)
        path.write_text("\n".join(rows), encoding="utf-8")
        return root

    return build


def rewrite(fn: Callable[[bytes], bytes], relative: str = KERNELS, base=text_root) -> Callable[[Path], Path]:
    def build(tmp: Path) -> Path:
        root = base(tmp)
        path = root / relative
        path.write_bytes(fn(path.read_bytes()))
        return root

    return build


def device_info(content: bytes) -> Callable[[Path], Path]:
    """A text root whose rank 0 holds CANN's raw data dir with ``content`` as its device info.json."""

    def build(tmp: Path) -> Path:
        root = text_root(tmp)
        device = root / RANK0 / "PROF_000001_20250101000000000_ABCDEFG" / "device_0"
        device.mkdir(parents=True)
        (device / "info.json").write_bytes(content)
        return root

    return build


def replace_file(make: Callable[[Path], None], relative: str = KERNELS) -> Callable[[Path], Path]:
    """A text root whose ``relative`` file is replaced by what ``make(path)`` puts there."""

    def build(tmp: Path) -> Path:
        root = text_root(tmp)
        path = root / relative
        path.unlink()
        make(path)
        return root

    return build


def db_sql(*statements: str, relative: str = DB0) -> Callable[[Path], Path]:
    def build(tmp: Path) -> Path:
        root = db_root(tmp)
        with sqlite3.connect(root / relative) as con:
            for statement in statements:
                con.execute(statement)
        return root

    return build


def fifo(path: Path) -> None:
    os.mkfifo(path)


def unix_socket(path: Path) -> None:
    short = Path(tempfile.mkdtemp(prefix="s", dir="/tmp")) / "s"  # AF_UNIX paths are short
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(short))
    sock.close()
    os.rename(short, path)  # the socket inode moves with its name


def symlink_loop(path: Path) -> None:
    other = path.with_name("loop_b.csv")
    path.symlink_to(other)
    other.symlink_to(path)


def long_name(data: bytes) -> bytes:
    rows = data.split(b"\n")
    cells = rows[4].split(b",")
    cells[1] = b"k" * (10 * 1024 * 1024)
    rows[4] = b",".join(cells)
    return b"\n".join(rows)


def duplicate_rows(data: bytes) -> bytes:
    rows = data.rstrip(b"\n").split(b"\n")
    return b"\n".join(rows + rows[1:]) + b"\n"


def duplicate_one_row(data: bytes) -> bytes:
    rows = data.rstrip(b"\n").split(b"\n")
    return b"\n".join(rows[:5] + [rows[4]] + rows[5:]) + b"\n"


def header_twice(data: bytes) -> bytes:
    rows = data.split(b"\n")
    rows[0] = rows[0].replace(b"Type", b"Name")
    return b"\n".join(rows)


def collection_manifest(content: str) -> Callable[[Path], Path]:
    def build(tmp: Path) -> Path:
        root = text_root(tmp)
        (root / "manifest.json").write_text(content, encoding="utf-8")
        return root

    return build


def nested(*parts: str) -> Callable[[Path], Path]:
    """The text root's rank dirs moved under ``parts`` inside the root."""

    def build(tmp: Path) -> Path:
        root = text_root(tmp)
        target = root.joinpath(*parts)
        target.mkdir(parents=True)
        for rank in ("rank0_ascend_pt", "rank1_ascend_pt"):
            (root / rank).rename(target / rank)
        return root

    return build


def rank_id_in_info(value: object) -> Callable[[Path], Path]:
    def build(tmp: Path) -> Path:
        root = text_root(tmp)
        info = root / RANK0 / "profiler_info_0.json"
        data = json.loads(info.read_text())
        data["rank_id"] = value
        info.unlink()
        (root / RANK0 / "profiler_info.json").write_text(json.dumps(data))
        return root

    return build


def non_utf8_rank_dir(tmp: Path) -> Path:
    root = text_root(tmp)
    os.rename(os.fsencode(root / RANK0), os.fsencode(root) + b"/rank0_\xff_ascend_pt")
    return root


def wal_db(tmp: Path) -> Path:
    """A db whose newest committed rows sit in its -wal file (a capture copied while open)."""
    root = db_root(tmp)
    db = root / DB0
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute("INSERT INTO TASK SELECT * FROM TASK ORDER BY startNs DESC LIMIT 1")
    con.execute(
        "UPDATE TASK SET startNs = startNs + 1000000, endNs = endNs + 1000000, globalTaskId = globalTaskId + 10000000 "
        "WHERE rowid = (SELECT max(rowid) FROM TASK)"
    )
    con.execute(
        "INSERT INTO COMPUTE_TASK_INFO SELECT name, globalTaskId + 10000000, blockDim, mixBlockDim, taskType, opType, "
        "inputFormats, inputDataTypes, inputShapes, outputFormats, outputDataTypes, outputShapes, attrInfo "
        "FROM COMPUTE_TASK_INFO WHERE globalTaskId = (SELECT globalTaskId - 10000000 FROM TASK "
        "WHERE rowid = (SELECT max(rowid) FROM TASK))"
    )
    con.commit()
    # a copy of the three files taken while the writer is still open: the rows live only in the WAL
    wal = Path(f"{db}-wal").read_bytes()
    shm = Path(f"{db}-shm").read_bytes()
    main = db.read_bytes()
    con.close()  # closing checkpoints the WAL; put the open-time state back
    db.write_bytes(main)
    Path(f"{db}-wal").write_bytes(wal)
    Path(f"{db}-shm").write_bytes(shm)
    return root


def hot_journal_db(tmp: Path) -> Path:
    """A db copied in the middle of a write transaction: its -journal holds the pages to restore."""
    root = db_root(tmp)
    db = root / DB0
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("PRAGMA journal_mode=DELETE")
    con.execute("PRAGMA cache_size=1")  # spill the change into the db file before the commit
    con.execute("BEGIN")
    con.execute("UPDATE TASK SET startNs = startNs + 7")
    journal = Path(f"{db}-journal").read_bytes()
    main = db.read_bytes()
    con.execute("ROLLBACK")
    con.close()
    db.write_bytes(main)  # the half-written state a copy of the open capture would hold
    Path(f"{db}-journal").write_bytes(journal)
    return root


def corrupt_page_db(tmp: Path) -> Path:
    """A db whose first COMPUTE_TASK_INFO page is overwritten (a bad sector, a torn copy): sqlite opens
    it and reads its schema, and fails only in the query that reaches the page."""
    root = db_root(tmp)
    db = root / DB0
    with sqlite3.connect(db) as con:
        size = con.execute("PRAGMA page_size").fetchone()[0]
        (page,) = con.execute("SELECT min(pageno) FROM dbstat WHERE name = 'COMPUTE_TASK_INFO'").fetchone()
    with open(db, "r+b") as handle:
        handle.seek((page - 1) * size)
        handle.write(b"\xff" * size)
    return root


def sparse_db_with_wal(tmp: Path) -> Path:
    """A db stretched to 1 GiB of holes with a small -wal beside it: recovering it would copy the whole
    apparent size to the temp dir before anything else looked at it."""
    root = db_root(tmp)
    db = root / DB0
    os.truncate(db, 1 << 30)
    Path(f"{db}-wal").write_bytes(b"\0" * 4096)
    return root


def output_under_file(tmp: Path, root: Path) -> Path:
    (tmp / "a_file").write_text("x")
    return tmp / "a_file" / "out"


def output_with_user_file(tmp: Path, root: Path) -> Path:
    out = tmp / "out"
    out.mkdir()
    (out / "thesis_draft.docx").write_text("mine")
    (out / "manifest.json").write_text("{}")
    return out


def _db_cases() -> list[Case]:
    return [
        Case(
            "db_text_timestamp",
            db_sql("UPDATE TASK SET startNs = 'yesterday' WHERE rowid = 3"),
            EXIT_BAD_INPUT,
            "startNs",
            names="ascend_pytorch_profiler_0.db",
        ),
        Case(
            "db_real_out_of_range",
            db_sql("UPDATE TASK SET startNs = 1e30 WHERE rowid = 3"),
            EXIT_BAD_INPUT,
            "startNs",
            names="ascend_pytorch_profiler_0.db",
        ),
        Case(
            "db_negative_start",
            db_sql("UPDATE TASK SET startNs = -5 WHERE rowid = 3"),
            EXIT_BAD_INPUT,
            "negative",
            names="ascend_pytorch_profiler_0.db",
        ),
        Case(
            "db_end_before_start",
            db_sql("UPDATE TASK SET endNs = startNs - 10 WHERE rowid = 3"),
            EXIT_BAD_INPUT,
            "ends before it starts",
            names="ascend_pytorch_profiler_0.db",
        ),
        Case(
            "db_null_start",
            db_sql("UPDATE TASK SET startNs = NULL WHERE rowid = 3"),
            EXIT_BAD_INPUT,
            "startNs",
            names="ascend_pytorch_profiler_0.db",
        ),
        Case(
            "db_empty_string_id_name",
            db_sql("UPDATE STRING_IDS SET value = '' WHERE id IN (SELECT name FROM COMPUTE_TASK_INFO LIMIT 1)"),
            EXIT_BAD_INPUT,
            "empty kernel name",
            names="ascend_pytorch_profiler_0.db",
        ),
        Case(
            "db_duplicate_task_rows",
            db_sql(
                "INSERT INTO TASK SELECT * FROM TASK "
                "WHERE globalTaskId IN (SELECT globalTaskId FROM COMPUTE_TASK_INFO LIMIT 5)"
            ),
            EXIT_OK,
            "5 duplicate rows dropped",
            events=DB_EVENTS,
        ),
        Case("db_table_name_with_quote", db_sql('CREATE TABLE "odd""name" (x INTEGER)'), EXIT_OK, "", events=DB_EVENTS),
        # the one row committed only to the -wal is read, from a private copy (nothing written beside)
        Case("db_wal_holds_rows", wal_db, EXIT_OK, "-wal", events=DB_EVENTS + 1),
        Case("db_hot_journal", hot_journal_db, EXIT_OK, "-journal", events=DB_EVENTS),
        Case(
            "db_truncated",
            rewrite(lambda b: b[: len(b) // 3], DB0, db_root),
            EXIT_BAD_INPUT,
            "",
            names="ascend_pytorch_profiler_0.db",
        ),
        Case(
            "db_random_bytes",
            rewrite(lambda b: os.urandom(4096), DB0, db_root),
            EXIT_BAD_INPUT,
            "",
            names="ascend_pytorch_profiler_0.db",
        ),
        Case(
            "db_sparse_with_wal",
            sparse_db_with_wal,
            EXIT_BAD_INPUT,
            "a sparse file",
            names="ascend_pytorch_profiler_0.db",
        ),
        Case("db_corrupt_page", corrupt_page_db, EXIT_BAD_INPUT, "malformed", names="ascend_pytorch_profiler_0.db"),
        Case(
            "db_no_rows",
            db_sql("DELETE FROM TASK", "DELETE FROM COMMUNICATION_OP"),
            EXIT_BAD_INPUT,
            "no compute or communication rows",
            names="ascend_pytorch_profiler_0.db",
        ),
    ]


def _value_cases() -> list[Case]:
    k = "kernel_details.csv"
    return [
        Case("duration_nan", set_cell("Duration(us)", "nan"), EXIT_BAD_INPUT, "Duration(us)", names=k, line=5),
        Case("duration_inf", set_cell("Duration(us)", "inf"), EXIT_BAD_INPUT, "Duration(us)", names=k, line=5),
        Case("duration_minus_inf", set_cell("Duration(us)", "-inf"), EXIT_BAD_INPUT, "Duration(us)", names=k, line=5),
        Case("duration_negative", set_cell("Duration(us)", "-5.5"), EXIT_BAD_INPUT, "negative", names=k, line=5),
        Case("duration_overflow", set_cell("Duration(us)", "1e300"), EXIT_BAD_INPUT, "out of range", names=k, line=5),
        Case(
            "duration_int64_edge",
            set_cell("Duration(us)", "9223372036854775.807"),
            EXIT_BAD_INPUT,
            "out of range",
            names=k,
            line=5,
        ),
        Case("start_nan", set_cell("Start Time(us)", "nan"), EXIT_BAD_INPUT, "Start Time(us)", names=k, line=5),
        Case("start_inf", set_cell("Start Time(us)", "inf"), EXIT_BAD_INPUT, "Start Time(us)", names=k, line=5),
        Case(
            "start_negative",
            set_cell("Start Time(us)", "-1736405443881410.320\t"),
            EXIT_BAD_INPUT,
            "negative",
            names=k,
            line=5,
        ),
        Case(
            "start_overflow",
            set_cell("Start Time(us)", "99999999999999999999999.5\t"),
            EXIT_BAD_INPUT,
            "out of range",
            names=k,
            line=5,
        ),
        Case(
            "start_int64_edge",
            set_cell("Start Time(us)", "9223372036854775.807\t"),
            EXIT_BAD_INPUT,
            "out of range",
            names=k,
            line=5,
        ),
        Case("start_empty", set_cell("Start Time(us)", ""), EXIT_BAD_INPUT, "empty", names=k, line=5),
        Case(
            "start_not_a_number", set_cell("Start Time(us)", "12abc"), EXIT_BAD_INPUT, "not a decimal", names=k, line=5
        ),
        Case("wait_nan", set_cell("Wait Time(us)", "nan"), EXIT_BAD_INPUT, "Wait Time(us)", names=k, line=5),
        Case("wait_negative", set_cell("Wait Time(us)", "-3"), EXIT_BAD_INPUT, "negative", names=k, line=5),
        Case("block_dim_float_exponent", set_cell("Block Dim", "1e99"), EXIT_BAD_INPUT, "Block Dim", names=k, line=5),
        Case("step_id_text", set_cell("Step Id", "abc"), EXIT_BAD_INPUT, "Step Id", names=k, line=5),
        Case(
            "step_id_overflow", set_cell("Step Id", "99999999999999999999"), EXIT_BAD_INPUT, "Step Id", names=k, line=5
        ),
        Case("name_empty", set_cell("Name", ""), EXIT_BAD_INPUT, "empty", names=k, line=5),
        Case("name_ten_mib", rewrite(long_name), EXIT_BAD_INPUT, "longer than", names=k, line=5),
        Case(
            "non_utf8_byte",
            rewrite(lambda b: b.replace(LINE5_NAME, b"trans_Trans\xffData_2", 1)),
            EXIT_BAD_INPUT,
            "not UTF-8",
            names=k,
            line=5,
        ),
        # odd but valid: a NUL or a quoted newline inside a name is kept byte for byte
        Case(
            "nul_byte_in_a_name",
            rewrite(lambda b: b.replace(LINE5_NAME, b"trans_Trans\x00Data_2", 1)),
            EXIT_OK,
            "",
            events=2 * TEXT_ROWS,
        ),
    ]


def _shape_cases() -> list[Case]:
    k = "kernel_details.csv"
    return [
        Case("cr_only_line_endings", rewrite(lambda b: b.replace(b"\n", b"\r")), EXIT_OK, "", events=2 * TEXT_ROWS),
        Case(
            "crlf_and_bom",
            rewrite(lambda b: b"\xef\xbb\xbf" + b.replace(b"\n", b"\r\n")),
            EXIT_OK,
            "",
            events=2 * TEXT_ROWS,
        ),
        Case(
            "truncated_last_row",
            rewrite(lambda b: b.rstrip(b"\n")[:-12]),
            EXIT_BAD_INPUT,
            "truncated",
            names=k,
            line=TEXT_ROWS + 1,
        ),
        Case("header_only", rewrite(lambda b: b.split(b"\n")[0] + b"\n"), EXIT_BAD_INPUT, "no data rows", names=k),
        Case("empty_file", rewrite(lambda b: b""), EXIT_BAD_INPUT, "empty file", names=k),
        Case(
            "missing_duration_column",
            rewrite(lambda b: b.replace(b"Duration(us)", b"Dur")),
            EXIT_BAD_INPUT,
            "Duration(us)",
            names=k,
        ),
        Case("header_column_twice", rewrite(header_twice), EXIT_BAD_INPUT, "twice", names=k, line=1),
        Case("all_rows_duplicated", rewrite(duplicate_rows), EXIT_OK, "duplicate", events=2 * TEXT_ROWS),
        Case("one_row_duplicated", rewrite(duplicate_one_row), EXIT_OK, "1 duplicate", events=2 * TEXT_ROWS),
        Case(
            "newline_inside_quotes",
            rewrite(lambda b: b.replace(LINE5_NAME, b'"trans_\nTransData_2"', 1)),
            EXIT_OK,
            "",
            events=2 * TEXT_ROWS,
        ),
    ]


def _file_kind_cases() -> list[Case]:
    k = "kernel_details.csv"
    return [
        Case("kernel_csv_is_a_fifo", replace_file(fifo), EXIT_BAD_INPUT, "not a regular file", names=k),
        Case(
            "kernel_csv_is_a_directory",
            replace_file(lambda p: p.mkdir()),
            EXIT_BAD_INPUT,
            "not a regular file",
            names=k,
        ),
        Case(
            "kernel_csv_is_a_device",
            replace_file(lambda p: p.symlink_to("/dev/zero")),
            EXIT_BAD_INPUT,
            "not a regular file",
            names=k,
        ),
        Case("kernel_csv_is_a_socket", replace_file(unix_socket), EXIT_BAD_INPUT, "not a regular file", names=k),
        Case("kernel_csv_symlink_loop", replace_file(symlink_loop), EXIT_BAD_INPUT, "", names=k),
        Case(
            "kernel_csv_dangling_symlink",
            replace_file(lambda p: p.symlink_to(p.with_name("gone.csv"))),
            EXIT_BAD_INPUT,
            "",
            names=k,
        ),
        Case(
            "profiler_db_is_a_fifo",
            lambda tmp: _db_fifo(tmp),
            EXIT_BAD_INPUT,
            "not a regular file",
            names="ascend_pytorch_profiler_0.db",
        ),
        Case(
            "trace_view_is_a_fifo",
            replace_file(fifo, f"{RANK0}/ASCEND_PROFILER_OUTPUT/trace_view.json"),
            EXIT_BAD_INPUT,
            "not a regular file",
            names="trace_view.json",
        ),
        Case(
            "profiler_metadata_is_a_fifo",
            replace_file(fifo, f"{RANK0}/profiler_metadata.json"),
            EXIT_BAD_INPUT,
            "not a regular file",
            names="profiler_metadata.json",
        ),
        Case(
            "profiler_info_is_a_fifo",
            replace_file(fifo, f"{RANK0}/profiler_info_0.json"),
            EXIT_BAD_INPUT,
            "not a regular file",
            names="profiler_info_0.json",
        ),
    ]


def _db_fifo(tmp: Path) -> Path:
    root = db_root(tmp)
    (root / DB0).unlink()
    os.mkfifo(root / DB0)
    return root


def _layout_cases() -> list[Case]:
    return [
        Case("rank_dirs_under_logs", nested("logs", "run1"), EXIT_OK, "", events=2 * TEXT_ROWS),
        Case("symlinked_dir_loop", lambda tmp: _dir_loop(tmp), EXIT_OK, "", events=2 * TEXT_ROWS),
        Case("rank_dirs_twelve_levels_deep", nested(*[f"d{i}" for i in range(12)]), EXIT_OK, "", events=2 * TEXT_ROWS),
        Case("rank_dir_name_not_utf8", non_utf8_rank_dir, EXIT_OK, "", events=2 * TEXT_ROWS),
        Case("rank_id_too_large", rank_id_in_info(2**70), EXIT_BAD_INPUT, "rank id", names="profiler_info.json"),
        Case("rank_id_negative", rank_id_in_info(-4), EXIT_BAD_INPUT, "rank id", names="profiler_info.json"),
        Case(
            "profiler_info_broken_json",
            rewrite(lambda b: b[:-5], f"{RANK0}/profiler_info_0.json"),
            EXIT_DEGRADED,  # an auxiliary file: the analysis goes on without it and says so
            "broken JSON",
            names="profiler_info_0.json",
        ),
        Case(
            "profiler_metadata_broken_json",
            rewrite(lambda b: b'{"a": ', f"{RANK0}/profiler_metadata.json"),
            EXIT_DEGRADED,
            "broken JSON",
            names="profiler_metadata.json",
        ),
        Case(
            "device_info_broken_json",  # CANN's raw data beside the export: the card's core counts
            device_info(b'{"DeviceInfo": [{"ai_core_num": 24, '),
            EXIT_DEGRADED,
            "broken JSON",
            names="info.json",
        ),
        Case(
            "collection_manifest_broken_json",
            collection_manifest('{"analysis_status": "ok", '),
            EXIT_MANIFEST,
            "broken JSON",
            names="manifest.json",
        ),
        Case(
            "collection_manifest_not_ok",
            collection_manifest('{"analysis_status": "failed"}'),
            EXIT_MANIFEST,
            "analysis_status",
            names="manifest.json",
        ),
        Case(
            "collection_manifest_missing_root",
            collection_manifest('{"analysis_status": "ok", "profile_root": "/nonexistent/x"}'),
            EXIT_BAD_INPUT,
            "profile_root",
            names="manifest.json",
        ),
        Case("duplicate_rank_ids", _duplicate_ranks, EXIT_BAD_INPUT, "several captures in one folder?"),
        Case("only_backup_dirs", lambda tmp: _only_backups(tmp), EXIT_BAD_INPUT, ".bak"),
        Case("empty_root", lambda tmp: _mkdir(tmp / "root"), EXIT_BAD_INPUT, "no profiling data"),
        Case("root_does_not_exist", lambda tmp: tmp / "nowhere", EXIT_USAGE, "no such file"),
        Case("root_is_a_plain_file", lambda tmp: _plain_file(tmp), EXIT_BAD_INPUT, "expected a profiling directory"),
        Case(
            "one_rank_empty_csv",
            rewrite(lambda b: b""),
            EXIT_BAD_INPUT,
            "empty file",
            names="kernel_details.csv",
            phase="normalize (rank 0)",
        ),
    ]


def _dir_loop(tmp: Path) -> Path:
    root = text_root(tmp)
    (root / "again").symlink_to(root, target_is_directory=True)
    return root


def _duplicate_ranks(tmp: Path) -> Path:
    root = text_root(tmp)
    (root / "rank1_ascend_pt" / "profiler_info_1.json").rename(root / "rank1_ascend_pt" / "profiler_info_0.json")
    return root


def _only_backups(tmp: Path) -> Path:
    root = text_root(tmp)
    for rank in ("rank0_ascend_pt", "rank1_ascend_pt"):
        (root / rank).rename(root / f"{rank}.bak")
    return root


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def _plain_file(tmp: Path) -> Path:
    (tmp / "notes.txt").write_text("hello")
    return tmp / "notes.txt"


def _output_cases() -> list[Case]:
    return [
        Case("output_parent_is_a_file", text_root, EXIT_USAGE, "a_file", out=output_under_file),
        Case("output_under_dev_null", text_root, EXIT_USAGE, "/dev/null", out=lambda tmp, root: Path("/dev/null/out")),
        Case(
            "overwrite_output_is_the_root",
            text_root,
            EXIT_USAGE,
            "profiling root",
            extra_args=("--overwrite",),
            out=lambda tmp, root: root,
        ),
        Case(
            "overwrite_output_inside_a_rank_dir",
            text_root,
            EXIT_USAGE,
            "rank dir",
            extra_args=("--overwrite",),
            out=lambda tmp, root: root / RANK0 / "out",
        ),
        Case(
            "overwrite_output_is_an_ancestor_of_the_root",
            text_root,
            EXIT_USAGE,
            "contains the profiling root",
            extra_args=("--overwrite",),
            out=lambda tmp, root: tmp,
        ),
        Case(
            "overwrite_output_holds_user_files",
            text_root,
            EXIT_USAGE,
            "thesis_draft.docx",
            extra_args=("--overwrite",),
            out=output_with_user_file,
        ),
    ]


CASES: list[Case] = _value_cases() + _shape_cases() + _file_kind_cases() + _layout_cases() + _db_cases()
CASES += _output_cases()
