"""A worker serves its storage only: task messages naming paths outside it are refused, nothing touched.

Each message is published straight to the queue, as anyone who reaches the broker can; the worker
serves ``served/`` only, and every other dir of the test must come through unchanged.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli
from service_client import build_search_root, wait_state
from service_harness import wait_until

from npuprof.pipeline.runner import analyze
from npuprof.synth import generate
from npuprof.workers import records
from npuprof.workers.app import make_app
from npuprof.workers.recovery import mark_work_dir

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("service")]


# a newline in a path a message names, then what would read as a record of the worker's own
FORGED = "\n[2026-12-07 00:00:00,000: WARNING/MainProcess] forged record"


def _rank(rank_dir: str) -> dict:
    """A rank as discovery writes it into a task message."""
    return {"rank_id": 0, "rank_dir": rank_dir, "rank_id_from": "dir"}


def _listing(base: Path) -> list[str]:
    return sorted(str(p.relative_to(base)) for p in base.rglob("*"))


def test_messages_naming_paths_outside_the_served_storage_are_refused(redis_server, workers, tmp_path):
    served, outside = tmp_path / "served", tmp_path / "outside"
    victim = outside / "victim"
    victim.mkdir(parents=True)
    (victim / "precious.txt").write_text("keep me")
    escape = outside / ".escape.work-x"  # a marked work dir, but outside: the marker alone must not suffice
    mark_work_dir(escape, outside / "escape", "x")
    plain = served / "plain"
    plain.mkdir(parents=True)
    (plain / "keep.txt").write_text("mine")
    peaks = outside / "peaks.json"
    peaks.write_text('{"cube_tflops": {"bf16": 1}}')
    (served / "link").symlink_to(outside)  # inside by its name, outside once resolved
    before = _listing(outside)
    started = workers(1, storage=(served,))
    app = make_app(redis_server.url)
    root = str(served / "root")
    inside_inputs = {"requested_path": root, "root": root, "ranks": []}
    records.save({"sweep_id": "crafted", "archive": str(outside), "roots": [], "state": "running"}, redis_server.url)
    sent = [
        app.send_task("npuprof.analyze_rank", args=(str(escape), _rank(root), {}, ["normalize"])),
        app.send_task("npuprof.analyze_rank", args=(str(served), _rank("/etc"), {}, [])),
        app.send_task("npuprof.reduce_root", args=(str(escape), str(victim), inside_inputs, {}, [])),
        app.send_task(
            "npuprof.reduce_root", args=(str(served / "link" / ".escape.work-x"), str(victim), inside_inputs, {}, [])
        ),
        app.send_task(
            "npuprof.reduce_root", args=(str(served / ".w"), str(served / "o"), {"root": "/", "ranks": []}, {}, [])
        ),
        app.send_task("npuprof.run_stages", args=(str(victim), "report", "report", {})),
        app.send_task("npuprof.merge_sweep", args=("crafted", 0)),
        app.send_task("npuprof.run_stages", args=(f"{outside}/\x1b]0;owned\x07\x1b[2J{FORGED}", None, None, {})),
        app.send_task("npuprof.run_stages", args=(str(plain), None, None, {})),  # served, but not an output dir
        # every path inside but the file an option names, which the worker would read into the archive
        app.send_task("npuprof.analyze_rank", args=(str(served), _rank(root), {"hardware_profile": str(peaks)}, [])),
        app.send_task("npuprof.analyze_rank", args=(str(served), _rank(root), {"model_config": ["/etc"]}, [])),
    ]
    for result in sent:
        with pytest.raises(Exception, match="outside the storage this worker serves|not an absolute path|refused"):
            result.get(timeout=60)
    assert _listing(outside) == before
    (worker,) = started
    # the result reaches the backend before the worker logs the failure: wait for the line, not the result
    escaped = "\\x1b]0;owned\\x07"  # the title and clear-screen sequence named in a task, shown as escapes
    wait_until(lambda: escaped in worker.log_text(), 30, "the escaped task failure in the worker's log")
    log = worker.log_text()
    assert "\x1b" not in log and "\x07" not in log
    assert not [line for line in log.splitlines() if line.startswith(FORGED.strip())]  # no forged record
    assert (victim / "precious.txt").read_text() == "keep me"
    assert _listing(served) == ["link", "plain", "plain/keep.txt"]

    for sweep_id, archive, options in (
        ("planned", outside / "archive", {}),
        ("configured", served / "archive", {"model_config": str(outside / "config.json")}),
    ):
        record = {"sweep_id": sweep_id, "state": "planning", "roots": [], "plan_id": f"plan-{sweep_id}"}
        record |= {"search_roots": [str(served)], "archive": str(archive), "options": options}  # as submit saves it
        records.save(record, redis_server.url)
        args = (sweep_id, [str(served)], str(archive), options)
        plan = app.send_task("npuprof.plan_sweep", args=args, task_id=record["plan_id"])
        assert plan.get(timeout=60)["state"] == "failed"
        assert "outside the storage this worker serves" in records.load(sweep_id, redis_server.url)["error"]
        assert not archive.exists()

    # what run_stages is for: a range of stages again on an output dir the worker serves
    out = served / "out"
    analyze(generate(served / "root", "clean", steps=3, layers=2, trace=False)["root"], out, jobs=1)
    (out / "report" / "report.md").unlink()
    rerun = app.send_task("npuprof.run_stages", args=(str(out), "report", "report", {})).get(timeout=120)
    assert rerun["status"] == "ok" and (out / "report" / "report.md").exists(), rerun


def test_a_sweep_submitted_into_an_archive_outside_the_storage_fails_named_and_writes_nothing(
    redis_server, workers, tmp_path
):
    search = build_search_root(tmp_path / "captures", ["clean"], extra_samples=False, steps=6, trace=False)
    archive = tmp_path / "elsewhere" / "archive"
    workers(1, storage=(search,))
    run = run_cli("submit", "--search-root", str(search), "-o", str(archive), "--broker", redis_server.url)
    assert run.returncode == 0, run.stderr
    final = wait_state(redis_server.url, run.result["sweep_id"], ("failed",), timeout=60)
    assert f"{archive} is outside the storage this worker serves ({search})" in final["error"]
    assert not archive.parent.exists()


def test_a_worker_given_no_storage_does_not_start(tmp_path):
    env = {"NPUPROF_STORAGE_MAP": "", "NPUPROF_STORAGE_ROOTS": ""}
    run = run_cli("worker", "--broker", "redis://127.0.0.1:1/0", env=env)
    assert run.returncode == 2, run.stderr
    assert "was given none: npuprof worker --storage DIR" in run.stderr and "Traceback" not in run.stderr
    missing = run_cli("worker", "--storage", str(tmp_path / "nope"), "--broker", "redis://127.0.0.1:1/0", env=env)
    assert missing.returncode == 2 and f"--storage {tmp_path / 'nope'}: no such directory" in missing.stderr
