"""`npuprof query` runs untrusted SQL: it reads the archive's datasets and nothing else — no file
outside sweep_data/, no write, no extension, no configuration change — and says so in one line."""

from __future__ import annotations

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


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("sandbox")
    generate(base / "captures" / "one", "clean", steps=3, layers=2, trace=False)
    run_sweep([str(base / "captures")], base / "archive", jobs=1)
    (base / "secret.csv").write_text("token\nhunter2\n")  # beside the archive, not in it
    return base / "archive"


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
