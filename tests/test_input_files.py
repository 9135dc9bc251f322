"""A capture file is checked where it is opened: a worker's task checks every path before it starts, and a
file swapped afterwards for a link out of the storage, or for a FIFO, is refused by the reader itself."""

from __future__ import annotations

import os
import sqlite3
import threading

import pytest

from npuprof.pipeline import input_files
from npuprof.pipeline.errors import BadInput
from npuprof.pipeline.sources.kernel_csv import read_kernel_csv
from npuprof.pipeline.sources.profiler_db import connect_readonly
from npuprof.pipeline.stages.evidence.host_trace import read_host_events
from npuprof.synth import generate
from npuprof.workers import app, settings, storage

SECRET = "a file outside the storage"


@pytest.fixture
def served(tmp_path, monkeypatch):
    """A served storage dir holding one small synthetic root, the worker's confinement on; and a secret
    file outside it. The confinement is lifted after the test."""
    base = tmp_path / "served"
    root = generate(base / "root", "clean", ranks=2, steps=2, layers=2)["root"]
    (tmp_path / "secret.txt").write_text(SECRET)
    monkeypatch.setenv("NPUPROF_STORAGE_ROOTS", str(base))
    monkeypatch.setenv("NPUPROF_STORAGE_MAP", "")
    app.confine_inputs()  # what a worker process does as it starts
    yield base, next(base.joinpath("root").glob("*_1000_*/ASCEND_PROFILER_OUTPUT")), tmp_path / "secret.txt"
    input_files.confine_to([])
    assert root


def _swap_for_link(path, target) -> None:
    """What someone with write access to the storage does between the task's check and the read."""
    os.replace(path, path.with_suffix(".orig"))
    path.symlink_to(target)


def test_a_worker_confines_its_reads_to_the_storage_it_serves(served):
    base, _, _ = served
    assert input_files.confined() == tuple(settings.served_storage()) == (base.resolve(),)


@pytest.mark.parametrize("name", ["kernel_details.csv", "trace_view.json", "communication.json"])
def test_a_file_swapped_for_a_link_out_after_the_check_is_refused_where_it_is_read(served, name):
    base, output, secret = served
    path = output / name
    storage.require_served([path], "a rank task")  # the task's check passes: a plain file in storage
    _swap_for_link(path, secret)
    read = {
        "kernel_details.csv": lambda: read_kernel_csv(path),
        "trace_view.json": lambda: read_host_events(path, 0.0, 1e18, 1000),
        "communication.json": lambda: input_files.read_input_json(path),
    }[name]
    with pytest.raises(BadInput, match="outside the storage this worker serves") as refused:
        read()
    assert str(secret) in str(refused.value) and SECRET not in str(refused.value)


def test_a_db_swapped_for_a_link_out_is_refused(served, tmp_path):
    base, output, _ = served
    outside = tmp_path / "other.db"
    with sqlite3.connect(outside) as con:
        con.execute("CREATE TABLE secret (value TEXT)")
    db = output / "ascend_pytorch_profiler_0.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE STRING_IDS (id INTEGER, value TEXT)")
    assert "STRING_IDS" in {row[0] for row in connect_readonly(db).execute("SELECT name FROM sqlite_master")}
    _swap_for_link(db, outside)
    with pytest.raises(sqlite3.OperationalError, match="outside the storage"):  # as every db reader expects
        connect_readonly(db)


def test_links_inside_the_storage_are_read(served):
    base, output, _ = served
    elsewhere = base / "kept.csv"
    os.replace(output / "kernel_details.csv", elsewhere)
    (output / "kernel_details.csv").symlink_to(elsewhere)
    table, _ = read_kernel_csv(output / "kernel_details.csv")
    assert table.num_rows > 0


def test_a_fifo_swapped_in_is_refused_without_blocking(served):
    _, output, _ = served
    path = output / "step_trace_time.csv"
    os.remove(path)
    os.mkfifo(path)
    outcome: list = []
    reader = threading.Thread(target=lambda: outcome.append(_refusal(path)), daemon=True)
    reader.start()
    reader.join(10)
    assert outcome == ["not a regular file (a FIFO (named pipe))"]  # before: the open waited for a writer


def _refusal(path) -> str:
    try:
        input_files.read_input_bytes(path)
    except BadInput as exc:
        return exc.reason
    return "read"


def test_a_local_analysis_follows_its_users_links(tmp_path):
    """No storage is served outside a worker: a capture that links to files elsewhere is read."""
    assert input_files.confined() == ()
    target = tmp_path / "elsewhere.json"
    target.write_text('{"a": 1}')
    (tmp_path / "link.json").symlink_to(target)
    assert input_files.read_input_json(tmp_path / "link.json") == {"a": 1}
