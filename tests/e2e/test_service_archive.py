"""The service and the archive filesystem: a local sweep and a service sweep never write one archive
at once, and a full archive fails the roots it cannot hold, with the named error, never half a root."""

from __future__ import annotations

import subprocess

import pytest
from conftest import root_dirs, run_cli
from service_client import build_search_root, submit, wait_done, wait_state

from npuprof.pipeline import schema
from npuprof.pipeline.errors import EXIT_USAGE
from npuprof.pipeline.runner import run_lock
from npuprof.pipeline.sweep.rollup import root_status
from npuprof.synth import generate

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("service")]


def test_a_local_sweep_and_a_service_sweep_never_write_one_archive_at_once(redis_server, workers, tmp_path):
    search = build_search_root(tmp_path / "captures", ["clean", "slow_rank"], extra_samples=False, steps=6, trace=False)
    archive = tmp_path / "archive"
    archive.mkdir()
    storage = {"NPUPROF_STORAGE_MAP": f"lab={search}"}
    workers(1, env=storage)  # plans and supervises; the roots' tasks wait on storage.lab until its worker starts

    with run_lock(archive):  # a local sweep is writing the archive
        refused_id = submit(redis_server.url, search, archive)
        refused = wait_state(redis_server.url, refused_id, ("failed", "running"))
    assert refused["state"] == "failed", refused
    assert refused["error"].startswith(f"archive {archive} is being written by a local npuprof sweep (pid ")
    assert refused["exit_code"] == EXIT_USAGE and refused["roots"] == []
    assert not [p for p in archive.iterdir() if p.name != schema.RUN_LOCK], "nothing planned into it"

    sweep_id = submit(redis_server.url, search, archive)  # the local sweep ended: the same sweep is sent again
    assert sweep_id == refused_id
    wait_state(redis_server.url, sweep_id, ("running",))
    planned = sorted(p.name for p in archive.rglob("*"))  # the service's marked work dirs, its mark
    local = run_cli("sweep", "--search-root", str(search), "-o", str(archive), "--progress", "none")
    assert local.returncode == EXIT_USAGE, local.stderr
    assert f"being written by service sweep {sweep_id}" in local.result["error"]
    assert sorted(p.name for p in archive.rglob("*")) == planned, "the local sweep wrote nothing"

    workers(1, queues="storage.lab", env=storage)
    assert wait_done(redis_server.url, sweep_id)["totals"] == {"SUCCESS": 2}
    assert not (archive / schema.SERVICE_SWEEP_MARK).exists(), "the merge takes the mark away"
    again = run_cli("sweep", "--search-root", str(search), "-o", str(archive), "--reuse-existing", "--progress", "none")
    assert again.returncode == 0 and again.result["reused_roots"] == 2, again.stderr


def test_a_full_archive_fails_the_roots_it_cannot_hold_and_a_resubmit_finishes(
    redis_server, workers, tmp_path, small_filesystem
):
    search = tmp_path / "search"
    for seed in range(4):
        generate(search / f"r{seed}", "clean", seed=seed, ranks=2, steps=3)
    archive = small_filesystem
    workers(1)
    sweep_id = submit(redis_server.url, search, archive)
    final = wait_state(redis_server.url, sweep_id, ("done", "failed"), timeout=240)
    assert "Traceback" not in str(final)
    if final["state"] == "done":  # the rollup fit: every root ok or failed with the named error
        summary = final["summary"]
        lost = summary["failed_roots"] + summary["roots_not_written"]
        assert lost and summary["status_counts"].get("ok", 0) + len(lost) == 4, summary
        assert all(f["error"].startswith(f"no space left on device writing {archive}") for f in lost), lost
    else:
        assert final["error"] == f"no space left on device writing the rollup into {archive}"
    for out in root_dirs(archive):  # complete, or failed with its reason: never half
        assert (
            root_status(out) in ("ok", "failed") and (out / "manifest.json").exists() != (out / "failure.json").exists()
        ), out
    assert not [p.name for p in archive.iterdir() if p.name.startswith(".")], "no work dir, lock or mark is left"

    subprocess.run(["mount", "-o", "remount,size=64m", str(archive)], check=True)  # space returns
    landed_ok = sum(1 for p in root_dirs(archive) if root_status(p) == "ok")
    assert submit(redis_server.url, search, archive) == sweep_id  # finished roots are reused, the rest analyzed
    again = wait_done(redis_server.url, sweep_id, timeout=240)
    expected = {"REUSED": landed_ok, "SUCCESS": 4 - landed_ok}
    assert again["totals"] == {state: count for state, count in expected.items() if count}, again
    assert sorted(root_status(p) for p in root_dirs(archive)) == ["ok"] * 4
