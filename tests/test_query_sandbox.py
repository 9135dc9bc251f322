"""`npuprof query` runs untrusted SQL: it reads the archive's datasets and nothing else — no file
outside sweep_data/, no write, no extension, no configuration change — and says so in one line."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli

from npuprof.api import Sweep
from npuprof.pipeline import schema
from npuprof.pipeline.errors import UsageError
from npuprof.pipeline.sweep.local import run_sweep
from npuprof.synth import generate

# one worker runs the module: its module fixture is built once (xdist would build it again on each
# worker a test of it lands on, and again whenever modules interleave there)
pytestmark = pytest.mark.xdist_group("query_sandbox")


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("sandbox")
    generate(base / "captures" / "one", "clean", steps=3, layers=2, trace=False)
    run_sweep([str(base / "captures")], base / "archive", jobs=1)
    (base / "secret.csv").write_text("token\nhunter2\n")  # beside the archive, not in it
    return base / "archive"


_NPUPROF = shutil.which("npuprof") or str(Path(sys.executable).with_name("npuprof"))


def _refused(archive: Path, sql: str) -> str:
    run = run_cli("query", str(archive), sql)
    assert run.returncode == 2 and "Traceback" not in run.stderr, (sql, run.stdout, run.stderr)
    return run.result["error"]


def test_a_query_over_the_datasets_answers(archive):
    run = run_cli("query", str(archive), "SELECT count(*) AS n FROM roots")
    assert run.returncode == 0 and run.result["rows"] == [{"n": 1}], run.stderr
    assert len(Sweep(archive).query("DESCRIBE roots")) > 3  # describe and summarize are queries too
    # DuckDB draws a progress bar on stdout past 2 s of a query in a session it takes for an interactive
    # one (python -c, a notebook): it would land inside the answer
    sql = "SELECT current_setting('enable_progress_bar') AS bar"
    check = f"from npuprof.api import Sweep; print(Sweep({str(archive)!r}).query({sql!r})['bar'].tolist())"
    run = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[False]", run.stdout


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_text('/etc/hostname')",
        "SELECT * FROM glob('/root/*')",
        "SELECT * FROM read_csv('{secret}')",
        "SELECT * FROM read_parquet('{archive}/../secret.csv')",
    ],
)
def test_no_file_outside_the_datasets_is_read(archive, sql):
    sql = sql.format(secret=archive.parent / "secret.csv", archive=archive / schema.SWEEP_DATA_DIR)
    assert _refused(archive, sql).startswith("query failed: Permission Error")


@pytest.mark.parametrize(
    "sql",
    [
        "COPY (SELECT 1) TO '{target}'",
        "ATTACH '{target}.db' AS evil; CREATE TABLE evil.t AS SELECT 1",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET enable_external_access = true",
        "PRAGMA enable_profiling",
        "DROP VIEW roots",
        "CREATE TABLE t AS SELECT 1",
        "SELECT 1; COPY (SELECT 1) TO '{target}'",
    ],
)
def test_nothing_but_a_query_runs(archive, sql):
    target = archive / schema.SWEEP_DATA_DIR / "written"
    error = _refused(archive, sql.format(target=target))
    assert error.startswith("query refused: only queries run over a sweep archive"), error
    assert not list((archive / schema.SWEEP_DATA_DIR).glob("written*"))


def test_the_python_api_is_sandboxed_alike(archive):
    with pytest.raises(Exception, match="Permission Error"):
        Sweep(archive).query("SELECT * FROM read_csv('/etc/passwd')")
    with pytest.raises(Exception, match="query refused"):
        Sweep(archive).query(f"COPY (SELECT 1) TO '{archive.parent / 'x.csv'}'")
    assert not (archive.parent / "x.csv").exists()


def test_the_clis_limits_are_the_querys_own_defaults():
    """The CLI spells the defaults out (it starts without pandas, so it does not import them): the same."""
    from npuprof.api.cli import build_parser
    from npuprof.pipeline.sweep.sql_query import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S

    args = build_parser().parse_args(["query", "ARCHIVE", "SELECT 1"])
    assert (args.memory_limit, args.timeout) == (DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S)


def test_query_help_lists_its_own_exit_codes_not_the_analysis_ones():
    run = run_cli("query", "--help")
    assert run.returncode == 0 and "is not a query (COPY, ATTACH" in run.stdout
    assert "output dir" not in run.stdout and "degraded" not in run.stdout


def test_an_archive_whose_path_globs_is_refused_by_name(archive, tmp_path):
    """DuckDB takes a file name as a glob pattern: an archive under ``sweep[1]`` would read ``sweep1``'s
    datasets as its own. Such a path is refused in one line, before any query runs."""
    import shutil

    globbing = tmp_path / "sweep[1]"
    shutil.copytree(archive, globbing)
    with pytest.raises(UsageError, match=r"holds any of"):
        Sweep(globbing).query("SELECT count(*) FROM roots")
    run = run_cli("query", str(globbing), "SELECT count(*) FROM roots")
    assert run.returncode == 2 and "Traceback" not in run.stderr and "holds any of" in run.result["error"]


def test_explain_runs_only_over_a_query(archive):
    """EXPLAIN ANALYZE executes what it explains: an explained COPY is as refused as a COPY."""
    target = archive / schema.SWEEP_DATA_DIR / "roots.parquet"
    before = target.read_bytes()
    for sql in (
        f"EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{target}' (FORMAT parquet)",
        f"/* lead */ explain analyze COPY roots TO '{archive}/written.csv'",
        "EXPLAIN (FORMAT json) SELECT 1",
    ):
        assert _refused(archive, sql).startswith("query refused"), sql
    assert target.read_bytes() == before and not (archive / "written.csv").exists()
    assert len(Sweep(archive).query("EXPLAIN ANALYZE SELECT count(*) FROM roots")) >= 1


def test_only_the_dataset_files_are_readable_not_their_folder(archive):
    """The allow-list is the dataset files themselves: the merge's own state beside them in
    sweep_data/, or a glob over that folder, is refused like any file outside."""
    folder = archive / schema.SWEEP_DATA_DIR
    assert (folder / "roots.parquet").exists()
    for sql in (f"SELECT * FROM read_text('{folder}/*')", f"SELECT * FROM glob('{folder}/*')"):
        assert _refused(archive, sql).startswith("query failed: Permission Error"), sql


@pytest.mark.parametrize("link", ["sweep_data", "roots.parquet"])
def test_an_archive_whose_datasets_are_links_is_refused(archive, tmp_path, link):
    """A ``sweep_data`` linked to ``/`` would put the whole disk on the allow-list; a dataset linked
    to a secret would be read as that dataset. Either archive is refused by name before any SQL runs."""
    copy = tmp_path / "linked"
    shutil.copytree(archive, copy)
    folder = copy / schema.SWEEP_DATA_DIR
    if link == "sweep_data":
        shutil.rmtree(folder)
        folder.symlink_to("/")
    else:
        (folder / "roots.parquet").unlink()
        (folder / "roots.parquet").symlink_to(archive.parent / "secret.csv")
    error = _refused(copy, "SELECT 1")
    assert ("is a link" if link == "sweep_data" else "is not a regular file") in error, error


def test_a_query_is_stopped_at_its_time_and_memory(archive, tmp_path):
    """No query runs on or takes the machine's memory: past --timeout it is interrupted, past
    --memory-limit stopped, each in one line; and nothing spills into the working dir's .tmp/."""
    run = subprocess.run(
        [_NPUPROF, "query", str(archive), "SELECT count(*) FROM range(10_000_000_000_000)", "--timeout", "1"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert run.returncode == 2 and "query stopped after 1 s" in run.stderr, run.stderr
    for sql in ("SELECT list(range) FROM range(30_000_000)", "SELECT * FROM range(20_000_000) ORDER BY random()"):
        run = subprocess.run(
            [_NPUPROF, "query", str(archive), sql, "--memory-limit", "64"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
        )
        assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
        assert "needs more than 32MB of its 64 MB" in run.stderr or "a quarter of its 64 MB" in run.stderr, run.stderr
    assert not list(tmp_path.iterdir()), list(tmp_path.iterdir())  # no .tmp/ spill dir
    with pytest.raises(UsageError, match="result exceeds 8 MB, a quarter of its 32 MB"):
        Sweep(archive).query("SELECT repeat('x', 1000) AS s FROM range(100_000)", memory_mb=32)


def test_table_cells_reach_the_terminal_as_escapes(archive):
    """A cell's escape sequence or bidi override is shown, not acted on; the JSON keeps the data as is."""
    run = run_cli("query", str(archive), "SELECT chr(27) || '[2J' || chr(8238) AS s")
    assert run.returncode == 0, run.stderr
    assert "\x1b" not in run.stderr and "\u202e" not in run.stderr
    assert "\\x1b[2J\\u202e" in run.stderr
    assert run.result["rows"] == [{"s": "\x1b[2J\u202e"}]


def test_csv_on_a_full_disk_is_one_line_and_leaves_nothing(archive, tmp_path):
    """A write that fails (here: the file size limit, as a full disk would) is a usage error naming
    the file, with no partial CSV left."""
    import resource

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    target = tmp_path / "out.csv"
    argv = [_NPUPROF, "query", str(archive), "SELECT range FROM range(100_000)", "--csv", str(target)]
    run = subprocess.run(argv, capture_output=True, text=True, preexec_fn=small_files, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert f"--csv {target}: cannot write it" in run.stderr
    assert not list(tmp_path.iterdir())
