"""The served-storage check a worker applies to every path of a task, and the broker URL kept off argv."""

from __future__ import annotations

import os

import pytest
from conftest import run_cli

from npuprof.workers import settings, storage


@pytest.fixture
def served(tmp_path, monkeypatch):
    base = tmp_path / "served"
    base.mkdir()
    monkeypatch.setenv("NPUPROF_STORAGE_ROOTS", str(base))
    monkeypatch.setenv("NPUPROF_STORAGE_MAP", "")
    return base


def test_paths_under_the_served_storage_pass(served):
    storage.require_served([served, served / "a" / "b", None], "a test")


@pytest.mark.parametrize(
    "name, why",
    [
        ("dotdot", "outside the storage"),
        ("link", "outside the storage"),
        ("relative", "not an absolute path"),
        ("prefix", "outside the storage"),
        ("nul", "not an absolute path"),
    ],
)
def test_paths_that_leave_the_served_storage_are_refused(served, tmp_path, name, why):
    (tmp_path / "other").mkdir()
    (served / "link").symlink_to(tmp_path / "other")
    path = {
        "dotdot": f"{served}/../other",
        "link": f"{served}/link/x",
        "relative": "served/x",
        "prefix": f"{served}-sibling/x",  # a string prefix of the served dir is not under it
        "nul": f"{served}/\x00x",
    }[name]
    with pytest.raises(storage.OutsideStorage, match=why):
        storage.require_served([path], "a test")


def record_of(archive, **root) -> dict:
    """A sweep's record as the plan writes it to Redis: one root with its slug, key and dirs."""
    entry = {"root": "/data/r", "slug": "r-1234abcd", "key": "k1"}
    entry.update(final_dir=str(archive / entry["slug"]), work_dir=str(archive / ".r-1234abcd.work-k1"))
    return {"archive": str(archive), "roots": [{**entry, **root}]}


def test_a_sweep_record_that_keeps_its_roots_in_the_archive_passes(served):
    archive = served / "archive"
    storage.require_sweep_record(record_of(archive))
    odd = "..hidden-1234abcd"  # a root named ..hidden: an odd name, but one dir in the archive
    dirs = {"final_dir": str(archive / odd), "work_dir": str(archive / f".{odd}.work-k1")}
    storage.require_sweep_record(record_of(archive, slug=odd, **dirs))


@pytest.mark.parametrize(
    "edit",
    [
        {"slug": "../../../../base_out"},  # issue 71: the merge read and wrote outside the storage
        {"slug": ".."},
        {"slug": "a/b"},
        {"slug": "r\x00x"},
        {"final_dir": "/elsewhere/r-1234abcd"},
        {"work_dir": "/elsewhere/.r-1234abcd.work-k1"},
    ],
)
def test_a_sweep_record_naming_a_root_dir_outside_its_archive_is_refused(served, edit):
    """The record in Redis is not signed: anyone who can write to Redis can edit it; the merge (a
    signed task) checks it before it reads or writes a root's dir."""
    with pytest.raises(storage.OutsideStorage, match="refused the sweep's merge"):
        storage.require_sweep_record(record_of(served / "archive", **edit))


def test_a_sweep_record_of_an_archive_outside_the_storage_is_refused(served, tmp_path):
    with pytest.raises(storage.OutsideStorage, match="outside the storage"):
        storage.require_sweep_record(record_of(tmp_path / "other"))


def test_a_worker_with_no_storage_refuses_every_path(monkeypatch):
    monkeypatch.setenv("NPUPROF_STORAGE_ROOTS", "")
    monkeypatch.setenv("NPUPROF_STORAGE_MAP", "")
    with pytest.raises(storage.OutsideStorage, match="serves no storage"):
        storage.require_served(["/tmp"], "a test")


def test_the_storage_map_prefixes_are_served(tmp_path, monkeypatch):
    monkeypatch.setenv("NPUPROF_STORAGE_ROOTS", "")
    monkeypatch.setenv("NPUPROF_STORAGE_MAP", f"lab={tmp_path}")
    storage.require_served([tmp_path / "x"], "a test")


def test_every_path_of_a_rank_and_a_root_is_checked():
    rank = {"rank_id": 0, "rank_dir": "/r", "rank_id_from": "dir", "kernel_csv": "/r/k.csv"}
    rank["profiler_dbs"] = ["/r/a.db"]
    rank["supplemental"] = {"trace_view_json": "/r/t.json"}
    assert set(storage.rank_paths(rank)) >= {"/r", "/r/k.csv", "/r/a.db", "/r/t.json"}
    inputs = {"root": "/root", "requested_path": "/root", "ranks": [rank]}
    assert {"/root", "/r/t.json"} <= set(storage.inputs_paths(inputs))
    with pytest.raises(storage.OutsideStorage, match="no rank_dir"):
        storage.rank_paths({"rank_id": 0})
    with pytest.raises(storage.OutsideStorage, match="unknown or missing fields"):
        storage.rank_paths({**rank, "kernel_csv_elsewhere": "/etc/passwd"})  # a field no RankInput has
    with pytest.raises(storage.OutsideStorage, match="name no ranks"):
        storage.inputs_paths({"root": "/root"})


def test_the_broker_url_is_read_from_a_file_and_a_password_on_argv_is_warned_about(tmp_path, monkeypatch):
    secret = tmp_path / "broker"
    secret.write_text("\nredis://:s3cret@127.0.0.1:1/0\n")
    monkeypatch.delenv("NPUPROF_BROKER_URL", raising=False)
    monkeypatch.setenv("NPUPROF_BROKER_URL_FILE", str(secret))
    assert settings.broker_url() == "redis://:s3cret@127.0.0.1:1/0"
    status = run_cli("status", "abc", "--broker-file", str(secret))
    assert "cannot reach the broker at redis://:***@127.0.0.1:1/0" in status.stderr
    assert "s3cret" not in status.stderr + status.stdout and "warning" not in status.stderr
    on_argv = run_cli("status", "abc", "--broker", "redis://:s3cret@127.0.0.1:1/0")
    assert "warning: --broker carries a password, readable by every user in ps" in on_argv.stderr
    both = run_cli("status", "abc", "--broker", "redis://127.0.0.1:1/0", "--broker-file", str(secret))
    assert both.returncode == 2 and "not both" in both.stderr
    empty = tmp_path / "empty"
    empty.write_text("\n")
    assert "is empty" in run_cli("status", "abc", "--broker-file", str(empty)).stderr
    assert os.environ.get("NPUPROF_BROKER_URL") is None


def test_a_broker_url_from_a_file_reaches_the_worker_as_the_files_path(tmp_path, monkeypatch):
    """What ``npuprof worker`` / ``flower`` put in the environment of the process they exec (and of every
    pool child it forks): a URL read from a file stays there; one on argv or in the environment, which
    is already where the user put it, is passed on."""
    from npuprof.workers.launch import broker_env

    secret = tmp_path / "broker"
    monkeypatch.delenv("NPUPROF_BROKER_URL", raising=False)
    url = "redis://:s3cret@127.0.0.1:1/0"
    assert broker_env(url, url, str(secret)) == {"NPUPROF_BROKER_URL": None, "NPUPROF_BROKER_URL_FILE": str(secret)}
    assert broker_env(url, url, None) == {"NPUPROF_BROKER_URL": url}
    assert broker_env(url, None, None) == {}  # NPUPROF_BROKER_URL_FILE or the default, found as before
    monkeypatch.setenv("NPUPROF_BROKER_URL", url)
    assert broker_env(url, None, None) == {"NPUPROF_BROKER_URL": url}
