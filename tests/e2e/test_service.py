"""The service end to end: real redis-server, real Celery worker processes, real Flower, the CLI."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
import redis
from celery.states import READY_STATES
from conftest import root_dirs, run_cli
from helpers.auxiliary_files import CORRUPTIONS, FILES
from service_client import build_search_root, status, submit, wait_done
from service_harness import free_port, wait_until

from npuprof.pipeline import schema
from npuprof.pipeline.errors import EXIT_PARTIAL, UsageError
from npuprof.pipeline.sweep.rollup import root_status
from npuprof.synth import generate

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("service")]

COMPARED_OUT = ["output_dir", "elapsed_s"]  # where and how fast differ between runs; everything else must not


def rollup(archive: Path) -> pd.DataFrame:
    return (
        pd.read_csv(archive / "sweep_class_rollup.csv")
        .drop(columns=COMPARED_OUT)
        .sort_values("root")
        .reset_index(drop=True)
    )


# the sweep's merged views besides the rollup: cohorts, their baselines, outliers, fleet suspects, trends
MERGED_VIEWS = [
    schema.SWEEP_COHORTS,
    schema.SWEEP_COHORT_BASELINES,
    schema.SWEEP_OUTLIERS,
    schema.FLEET_SUSPECTS,
    schema.FLEET_LINK_SUSPECTS,
    schema.SWEEP_TRENDS,
]


def merged_view(archive: Path, name: str) -> pd.DataFrame:
    """One merged view, in a stable row order (the service merges roots as they land)."""
    frame = pd.read_csv(archive / name)
    return frame.sort_values(list(frame.columns)).reset_index(drop=True) if len(frame) else frame


def test_ten_root_sweep_through_two_workers_matches_the_local_sweep(redis_server, workers, tmp_path):
    """The service's archive equals a local sweep's, table for table: what the local sweep says of a
    planted sweep (``test_sweep_intelligence``) the service says of it too."""
    search = build_search_root(
        tmp_path / "captures",
        [
            "clean",
            "slow_rank",
            "ep_imbalance",
            "host_bubble",
            "partial_capture",
            "mixed",
            "pipeline_parallel",
            "dummy_rank",
        ],
    )
    pool = workers(2)
    series = ["--series-key", r"case_(\d+)"]  # the cases as a series: trends run on both sides
    sweep_id = submit(redis_server.url, search, tmp_path / "archive", *series)
    final = wait_done(redis_server.url, sweep_id)
    assert final["totals"] == {"SUCCESS": 9, "FAILURE": 1}
    failed = [r for r in final["roots"] if r["state"] == "FAILURE"]
    assert failed[0]["root"].endswith("broken_case") and "Start Time(us)" in failed[0]["error"]
    local = run_cli("sweep", "--search-root", str(search), "-o", str(tmp_path / "local"), "--progress", "none", *series)
    assert local.returncode == EXIT_PARTIAL  # the broken case failed; the sweep says so in its exit code
    pd.testing.assert_frame_equal(rollup(tmp_path / "archive"), rollup(tmp_path / "local"))
    for name in MERGED_VIEWS:
        service_view, local_view = merged_view(tmp_path / "archive", name), merged_view(tmp_path / "local", name)
        assert len(service_view.columns) and (name != schema.SWEEP_COHORTS or len(service_view)), name
        pd.testing.assert_frame_equal(service_view, local_view, obj=name)
    # both workers took work: one root's ranks spread over the pool
    assert all("Task npuprof.analyze_rank[" in w.log_text() for w in pool)  # a task line, not the start-up banner
    assert not list((tmp_path / "archive").glob(".*")), "no work dir is left in the archive"


RANK_TASK = "npuprof.analyze_rank"


def running_rank_tasks(worker) -> set[str]:
    """Ids of the rank tasks the worker received and has not finished, from its log (the start-up
    banner names every registered task and is no task event)."""
    events = worker.task_events(RANK_TASK)
    received = {task for task, event in events if event == "received"}
    return received - {task for task, event in events if event != "received"}


def frozen_in_flight(candidates, backend) -> tuple | None:
    """(a worker, frozen, and the id of its one rank task in flight), or None to look again. In flight: the
    worker's log says received and not finished, and the result backend holds no result for it — the log
    lags the task, which stores its result and is acknowledged before its 'succeeded' line is written, and a
    kill in between would kill nothing. Frozen, the task can neither end nor start between this look and
    the kill."""
    for worker in candidates:
        if not running_rank_tasks(worker):
            continue
        worker.freeze()
        running = [task for task in running_rank_tasks(worker) if backend.AsyncResult(task).state not in READY_STATES]
        if len(running) == 1:  # one child: one task in flight
            return worker, running[0]
        worker.thaw()
    return None


@pytest.mark.parametrize("how", ["pool_child", "worker_process"])
def test_a_killed_worker_loses_no_root(redis_server, workers, tmp_path, how):
    from npuprof.workers.app import make_app

    search = build_search_root(
        tmp_path / "captures", ["clean", "slow_rank"], extra_samples=False, steps=16, layers=12, trace=False
    )
    first, second = workers(2)
    sweep_id = submit(redis_server.url, search, tmp_path / "archive")
    backend = make_app(redis_server.url)
    victim, killed = wait_until(
        lambda: frozen_in_flight((first, second), backend),
        60,
        "a worker to be in the middle of a rank task",
        interval=0.05,
    )
    if how == "pool_child":
        victim.kill_child()
        victim.thaw()  # the worker's main process finds its child lost and requeues the task
    else:
        victim.kill_main()  # the unacknowledged message comes back after the visibility timeout
    final = wait_done(redis_server.url, sweep_id, timeout=300)
    assert final["totals"] == {"SUCCESS": 2}
    # the killed task was delivered again and ran to its end: the kill hit work in flight
    events = [event for w in (first, second) for task, event in w.task_events(RANK_TASK) if task == killed]
    assert events.count("received") >= 2 and "succeeded" in events, events
    archive = tmp_path / "archive"
    assert sorted(p.name.split("-")[0] for p in root_dirs(archive)) == [
        "captures__case_00_clean",
        "captures__case_01_slow_rank",
    ]
    for out in root_dirs(archive):
        if out.is_dir():
            assert (out / "manifest.json").exists() and (out / "classify_manifest.json").exists()
    assert not list(archive.glob(".*")), "no half-written root dir"


def test_redis_restart_mid_sweep_the_sweep_completes(redis_server, workers, tmp_path):
    search = build_search_root(
        tmp_path / "captures", ["clean", "slow_rank", "mixed"], extra_samples=False, steps=20, layers=12, trace=False
    )
    started = workers(2)
    sweep_id = submit(redis_server.url, search, tmp_path / "archive")
    wait_until(lambda: any(running_rank_tasks(w) for w in started), 60, "a rank task in flight", interval=0.05)
    for worker in started:  # the restart certainly comes while the sweep has work in flight
        worker.freeze()
    assert status(redis_server.url, sweep_id)["state"] == "running"
    redis_server.restart(down_seconds=3)
    for worker in started:
        worker.thaw()
    final = wait_done(redis_server.url, sweep_id, timeout=300)
    assert final["totals"] == {"SUCCESS": 3}
    assert len(pd.read_csv(tmp_path / "archive" / "sweep_class_rollup.csv")) == 3


def test_a_supervisor_that_stops_looking_is_replaced_as_roots_land(redis_server, workers, tmp_path):
    """The merge's next look lost, as a broker restart can lose it (every running copy told to stop): a
    root's reduce that lands once the last look is NPUPROF_MERGE_STALE_SECONDS old sends a new merge,
    with no client asking after the sweep."""
    search = build_search_root(
        tmp_path / "captures", ["clean", "slow_rank", "mixed"], extra_samples=False, steps=20, layers=12, trace=False
    )
    started = workers(1)
    sweep_id = submit(redis_server.url, search, tmp_path / "archive")
    client = redis.Redis.from_url(redis_server.url)
    wait_until(lambda: client.get(f"npuprof:looked:{sweep_id}"), 60, "the merge's first look")
    client.incr(f"npuprof:merge-generation:{sweep_id}")  # the merge stops at its next look
    # the worker frozen past the stale time (less than the visibility timeout, so nothing it holds is
    # delivered again): every reduce that lands after it finds the last look stale, however fast the
    # roots are (three small ones can all land within the stale time of the look)
    os.killpg(started[0].proc.pid, signal.SIGSTOP)
    time.sleep(float(started[0].env["NPUPROF_MERGE_STALE_SECONDS"]) + 0.5)
    os.killpg(started[0].proc.pid, signal.SIGCONT)
    assert not (tmp_path / "archive" / "sweep_summary.json").exists()
    wait_until((tmp_path / "archive" / "sweep_summary.json").exists, 300, "the rollup without a client")

    # the merge writes the rollup first and marks the sweep done after it: the record may lag the file
    def marked_done() -> bool:
        return json.loads(client.get(f"npuprof:sweep:{sweep_id}"))["state"] == "done"

    wait_until(marked_done, 30, "the sweep marked done")
    assert len(pd.read_csv(tmp_path / "archive" / "sweep_class_rollup.csv")) == 3
    # the stopped copy and the one that merged; a worker busy analyzing past the stale time may have
    # been sent one more copy, which the newest supersedes in turn (the worker logs a task's end just
    # after it returns)
    merged = f"npuprof.merge_sweep[npuprof-merge-{sweep_id}] succeeded"
    wait_until(lambda: started[0].log_text().count(merged) >= 2, 30, "the two merges' ends in the worker log")
    assert "'status': 'superseded'" in started[0].log_text()  # the old copy stopped; the new one merged


def test_a_supervisor_lost_as_the_last_roots_land_is_replaced_a_stale_time_later(redis_server, workers, tmp_path):
    """The merge's next look lost while the last roots land within the stale time of its last look (three
    small roots on one worker land in about 5 s; the stale time here is 30 s): no reduce lands late
    enough to notice, and no client asks; each reduce's second look (``watch_merge``, a stale time after
    it) does."""
    search = build_search_root(
        tmp_path / "captures", ["clean", "slow_rank", "mixed"], extra_samples=False, steps=20, layers=12, trace=False
    )
    started = workers(1, env={"NPUPROF_MERGE_STALE_SECONDS": "30"})
    sweep_id = submit(redis_server.url, search, tmp_path / "archive")
    client = redis.Redis.from_url(redis_server.url)
    wait_until(lambda: client.get(f"npuprof:looked:{sweep_id}"), 60, "the merge's first look")
    client.incr(f"npuprof:merge-generation:{sweep_id}")  # the merge stops at its next look
    wait_until((tmp_path / "archive" / "sweep_summary.json").exists, 120, "the rollup without a client")
    assert len(pd.read_csv(tmp_path / "archive" / "sweep_class_rollup.csv")) == 3
    log = started[0].log_text()
    assert "'status': 'superseded'" in log and "npuprof.watch_merge[" in log


def test_a_stale_supervisor_is_sent_again_once_by_whoever_asks(redis_server, monkeypatch):
    """merge_watch against a real Redis: a fresh look or a finished sweep sends nothing; a stale running
    sweep gets one new generation of its merge in its queue, and a second asker within the stale time
    none."""
    from npuprof.workers import merge_watch, records
    from npuprof.workers.app import make_app

    monkeypatch.setenv("NPUPROF_MERGE_STALE_SECONDS", "5")
    url, app = redis_server.url, make_app(redis_server.url)
    client = redis.Redis.from_url(url)
    record = {"sweep_id": "s1", "state": "running", "merge_id": "npuprof-merge-s1", "queue": "watch", "planned_at": 0}
    records.save(record, url)
    records.looked("s1", url)
    assert not merge_watch.revive_if_stale(app, "s1", url)  # it looked just now
    client.set("npuprof:looked:s1", time.time() - 6)
    records.save({**record, "state": "done"}, url)
    assert not merge_watch.revive_if_stale(app, "s1", url)  # nothing left to supervise
    records.save(record, url)
    assert merge_watch.revive_if_stale(app, "s1", url)
    assert not merge_watch.revive_if_stale(app, "s1", url)  # claimed: one revival per stale period
    assert records.merge_generation("s1", url) == 1
    (message,) = [json.loads(m) for m in client.lrange("npuprof:watch", 0, -1)]
    assert message["headers"]["id"] == "npuprof-merge-s1" and message["headers"]["argsrepr"] == "('s1', 1)"
    assert merge_watch.is_stale({**record, "planned_at": time.time()}, None, time.time(), 5) is False
    client.delete("npuprof:watch")
    records.delete("s1", url)  # as forget does: the revival's claim goes with the record
    assert not [key for key in client.scan_iter("npuprof:*") if b"s1" in key]


def test_broken_auxiliary_files_degrade_roots_through_the_service_as_they_do_locally(redis_server, workers, tmp_path):
    """Each auxiliary file broken on rank 0 of its own root: the service's rank tasks and reduce give the
    local sweep's rollup — every root ok, degraded, the file named — not a failure."""
    search = tmp_path / "captures"
    for index, (name, (base, relative, _)) in enumerate(sorted(FILES.items())):
        root = Path(generate(search / f"aux_{index}", base, seed=3, ranks=2, steps=3)["root"])
        CORRUPTIONS["garbage"](sorted(p for p in root.iterdir() if p.is_dir())[0] / relative)
    workers(2)
    final = wait_done(redis_server.url, submit(redis_server.url, search, tmp_path / "archive"))
    assert final["totals"] == {"SUCCESS": len(FILES)}
    local = run_cli("sweep", "--search-root", str(search), "-o", str(tmp_path / "local"), "--progress", "none")
    assert local.returncode == 0, local.stderr
    service_rollup = rollup(tmp_path / "archive")
    pd.testing.assert_frame_equal(service_rollup, rollup(tmp_path / "local"))
    assert set(service_rollup["analysis_status"]) == {"degraded"}
    for (name, _), reasons in zip(sorted(FILES.items()), service_rollup["degraded_reasons"]):
        assert name in reasons, (name, reasons)


def test_a_root_whose_chord_callback_is_lost_is_reduced_by_the_supervisor(redis_server, workers, tmp_path):
    """What a Redis restart can do at the wrong moment, made certain: the chords' size keys vanish
    before any rank runs, so no chord ever calls its reduce. The sweep still completes, once."""
    search = build_search_root(
        tmp_path / "captures", ["clean", "slow_rank"], extra_samples=False, steps=12, trace=False
    )
    storage = {"NPUPROF_STORAGE_MAP": f"lab={search}"}
    workers(1, env=storage)  # plans and supervises (queue npuprof); the roots' tasks go to storage.lab
    sweep_id = submit(redis_server.url, search, tmp_path / "archive")
    wait_until(lambda: status(redis_server.url, sweep_id)["state"] == "running", 60, "the sweep to be planned")
    client = redis.Redis.from_url(redis_server.url)
    sizes = list(client.scan_iter(match="npuprof:celery-taskset-meta-*.s"))
    assert len(sizes) >= 2  # one chord per root at least
    client.delete(*sizes)
    rank_worker = workers(1, queues="storage.lab", env=storage)[-1]
    final = wait_done(redis_server.url, sweep_id, timeout=120)
    assert final["totals"] == {"SUCCESS": 2}
    archive = tmp_path / "archive"
    assert sorted(root_status(p) for p in root_dirs(archive)) == ["ok", "ok"]
    assert not list(archive.glob(".*")), "no work dir or lock file is left in the archive"
    log = rank_worker.log_text()
    assert log.count("npuprof.reduce_root[") >= 2 and "succeeded" in log.split("npuprof.reduce_root[")[-1]


def test_submitting_the_same_sweep_twice_does_no_duplicate_work(redis_server, workers, tmp_path):
    search = build_search_root(tmp_path / "captures", ["clean", "slow_rank"], trace=False)
    started = workers(2)
    assert all(f"npuprof worker: broker {redis_server.url}\n" in w.log_text() for w in started)  # its first line
    archive = tmp_path / "archive"
    sweep_id = submit(redis_server.url, search, archive)
    for worker in started:  # the sweep certainly still running when it is submitted again
        worker.freeze()
    try:
        again = run_cli("submit", "--search-root", str(search), "-o", str(archive), "--broker", redis_server.url)
    finally:
        for worker in started:
            worker.thaw()
    assert again.result["state"] in ("planning", "running"), again.result
    assert again.result == {
        "sweep_id": sweep_id,
        "state": again.result["state"],
        "resubmitted": False,
        "broker": redis_server.url,
    }  # still running: not sent again
    wait_done(redis_server.url, sweep_id)
    manifests = {p: p.stat().st_mtime_ns for p in archive.glob("*/manifest.json")}
    assert len(manifests) == 3
    assert submit(redis_server.url, search, archive) == sweep_id
    final = wait_done(redis_server.url, sweep_id)
    assert final["totals"] == {"REUSED": 3, "FAILURE": 1}  # finished roots reused; the broken one is tried again
    assert {p: p.stat().st_mtime_ns for p in archive.glob("*/manifest.json")} == manifests
    keys = list(redis.Redis.from_url(redis_server.url).scan_iter(count=1000))
    assert keys and all(k.startswith(b"npuprof:") for k in keys), keys  # a shared Redis stays readable


def test_fetch_copies_only_from_the_archive(redis_server, workers, tmp_path):
    search = build_search_root(tmp_path / "captures", ["clean"], extra_samples=False, trace=False)
    workers(1)
    sweep_id = submit(redis_server.url, search, tmp_path / "archive")
    wait_done(redis_server.url, sweep_id)
    run = run_cli(
        "fetch", sweep_id, "--root", "case_00_clean", "-o", str(tmp_path / "dest"), "--broker", redis_server.url
    )
    assert run.returncode == 0, run.stderr
    names = {Path(p).name for p in run.result["copied"]}
    assert {"sweep_class_rollup.csv", "sweep_summary.json", "manifest.json", "step_summary.csv"} <= names
    assert {"sweep_report.html", "fleet_suspects.csv", "sweep_outliers.csv", "roots.parquet", "ranks.parquet"} <= names
    assert (
        run_cli(
            "fetch", sweep_id, "--root", "../../etc", "-o", str(tmp_path / "d2"), "--broker", redis_server.url
        ).returncode
        == 2
    )
    unknown_sweep = run_cli("status", "no-such-sweep", "--broker", redis_server.url)
    assert unknown_sweep.returncode == 2 and redis_server.url in unknown_sweep.result["error"]  # which broker
    unknown = run_cli("fetch", sweep_id, "--root", "case_09", "-o", str(tmp_path / "d3"), "--broker", redis_server.url)
    assert unknown.returncode == 2 and "case_00_clean" in unknown.result["error"]  # the valid roots, listed
    finished = run_cli("cancel", sweep_id, "--broker", redis_server.url)
    assert finished.result["state"] == "done" and finished.result["revoked"] == 0  # nothing revoked


def test_a_root_name_several_roots_share_is_an_error_listing_them():
    from npuprof.api.service import _fetch_paths

    record = {
        "roots": [
            {"root": "/data/a/level2", "slug": "a-level2-1f2e"},
            {"root": "/data/b/level2", "slug": "b-level2-9c0d"},
        ]
    }
    with pytest.raises(UsageError, match="names 2 roots .*a-level2-1f2e, b-level2-9c0d"):
        _fetch_paths(record, "s1", "level2")
    assert _fetch_paths(record, "s1", "b-level2-9c0d")[-1].startswith("b-level2-9c0d/")


def test_a_service_archive_compares_against_a_baseline_like_a_local_one(redis_server, workers, tmp_path):
    search = build_search_root(tmp_path / "captures", ["clean", "slow_rank"], extra_samples=False, trace=False)
    workers(1)
    archive = tmp_path / "archive"
    wait_done(redis_server.url, submit(redis_server.url, search, archive))
    run = run_cli("compare", "--sweep", str(archive), "--baseline", "case_00_clean", "-o", str(tmp_path / "cmp"))
    assert run.returncode == 0, run.stderr
    rollup = pd.read_csv(tmp_path / "cmp" / "sweep_class_rollup.csv").set_index("slug")
    statuses = dict(zip(rollup.index.str.contains("slow_rank"), rollup["compare_status"]))
    assert statuses == {False: "baseline", True: "compared"}
    slow = rollup[rollup.index.str.contains("slow_rank")].iloc[0]
    assert slow["step_wall_ms_delta"] > 0 and slow["significant_changes"] > 0  # rank 2 computes 1.6x slower


def test_unreachable_broker_is_a_clean_error(tmp_path):
    run = run_cli(
        "submit",
        "--search-root",
        str(tmp_path),
        "-o",
        str(tmp_path / "a"),
        "--broker",
        f"redis://127.0.0.1:{free_port()}/0",
    )
    assert run.returncode == 6 and run.result["kind"] == "service_unavailable"
    assert len(run.stderr.strip().splitlines()) == 1


def test_flower_shows_the_workers_and_the_sweep_tasks(redis_server, workers, tmp_path):
    search = build_search_root(tmp_path / "captures", ["clean"], extra_samples=False, trace=False)
    workers(1)
    port = free_port()
    env = {**os.environ, "FLOWER_UNAUTHENTICATED_API": "true"}
    flower = subprocess.Popen(
        [sys.executable, "-m", "npuprof.api.cli", "flower", "--port", str(port), "--broker", redis_server.url],
        env=env,
        stdout=open(tmp_path / "flower.log", "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:

        def get(path: str):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
                    return json.loads(response.read())
            except OSError:
                return None

        wait_until(lambda: get("/api/workers") is not None, 60, "Flower to serve its API")
        sweep_id = submit(redis_server.url, search, tmp_path / "archive")
        wait_done(redis_server.url, sweep_id)
        workers_seen = wait_until(lambda: get("/api/workers?refresh=1"), 30, "Flower to see a worker")
        assert any(name.startswith("w1@") for name in workers_seen)
        tasks = wait_until(
            lambda: (t := get("/api/tasks")) and any(v.get("name") == "npuprof.merge_sweep" for v in t.values()) and t,
            60,
            "Flower to list the sweep's tasks",
        )
        names = {v.get("name") for v in tasks.values()}
        assert {"npuprof.plan_sweep", "npuprof.analyze_rank", "npuprof.reduce_root", "npuprof.merge_sweep"} <= names
    finally:
        os.killpg(flower.pid, 15)
        flower.wait(timeout=20)


def test_roots_are_routed_to_the_queue_of_their_storage(redis_server, workers, tmp_path):
    search = build_search_root(tmp_path / "lab" / "captures", ["clean"], extra_samples=False, trace=False)
    storage = {"NPUPROF_STORAGE_MAP": f"lab={tmp_path / 'lab'}"}
    (worker,) = workers(1, queues="storage.lab", env=storage)  # the only worker listens on the lab storage's queue
    run = run_cli(
        "submit",
        "--search-root",
        str(search),
        "-o",
        str(tmp_path / "lab" / "archive"),
        "--broker",
        redis_server.url,
        env=storage,
    )
    assert run.returncode == 0, run.stderr
    final = wait_done(redis_server.url, run.result["sweep_id"])
    assert final["totals"] == {"SUCCESS": 1}
    assert "Task npuprof.reduce_root[" in worker.log_text()


BAD_ROOTS_THROUGH_THE_SERVICE = [
    "duration_nan",
    "start_overflow",
    "kernel_csv_is_a_fifo",
    "header_column_twice",
    "db_text_timestamp",
    "collection_manifest_not_ok",
    "rank_id_too_large",
]


def test_a_worker_refuses_a_rank_too_big_for_its_memory_by_name(redis_server, workers, tmp_path):
    """A worker whose machine cannot hold a rank (here: a working-set factor no machine meets) fails that
    root with the named error `npuprof analyze` gives, instead of dying under the task; it lives on."""
    generate(tmp_path / "captures" / "clean", "clean", seed=1)
    (worker,) = workers(1, env={"NPUPROF_MEMORY_FACTOR": "1e9"})
    sweep_id = submit(redis_server.url, tmp_path / "captures", tmp_path / "archive")
    final = wait_done(redis_server.url, sweep_id)
    assert final["totals"] == {"FAILURE": 1}
    refused = r"^rank \d needs about .* GB of memory .* this machine has .* available"
    assert re.search(refused, final["roots"][0]["error"])
    assert worker.proc.poll() is None and "WorkerLostError" not in worker.log_text()


def test_bad_roots_fail_alone_through_the_service_with_the_cli_error(redis_server, workers, tmp_path):
    from badinputs.corpus import CASES
    from service_harness import redis_values

    search = tmp_path / "captures"
    cases = {c.name: c for c in CASES}
    for name in BAD_ROOTS_THROUGH_THE_SERVICE:
        root = cases[name].build(search / name)
        expected = run_cli("analyze", str(root), "-o", str(tmp_path / "local" / name), "--progress", "none")
        assert expected.returncode == cases[name].exit_code, expected.stderr
        cases[name] = expected.result["error"]
    generate(search / "good" / "clean", "clean", seed=1)
    # an unreadable auxiliary file degrades its root, through the service as through analyze
    degraded = Path(generate(search / "good" / "degraded", "clean", seed=2, ranks=2, steps=3)["root"])
    rank0 = sorted(p for p in degraded.iterdir() if p.is_dir())[0]
    (rank0 / "ASCEND_PROFILER_OUTPUT" / "communication.json").write_bytes(b"\xff\xfe garbage")
    workers(1)
    sweep_id = submit(redis_server.url, search, tmp_path / "archive")
    wait_done(redis_server.url, sweep_id)
    watch = run_cli("status", sweep_id, "--watch", "--json", "--broker", redis_server.url)
    assert watch.returncode == EXIT_PARTIAL  # done, with failed roots: not the all-ok exit code
    final = watch.result
    assert final["totals"] == {"SUCCESS": 2, "FAILURE": len(BAD_ROOTS_THROUGH_THE_SERVICE)}
    case_of = lambda root: Path(root).relative_to(search.resolve()).parts[0]  # noqa: E731
    by_root = {case_of(r["root"]): r for r in final["roots"]}
    table = pd.read_csv(tmp_path / "archive" / "sweep_class_rollup.csv")
    rollup_errors = {case_of(root): error for root, error in zip(table["root"], table["error"])}
    for name in BAD_ROOTS_THROUGH_THE_SERVICE:
        assert by_root[name]["state"] == "FAILURE"
        assert by_root[name]["error"] == cases[name], name  # the same one line as `npuprof analyze`
        assert rollup_errors[name] == cases[name], name
    row = table[table["root"].str.endswith("good/degraded")].iloc[0]
    assert row["status"] == "ok" and row["analysis_status"] == "degraded"
    assert row["degraded_reasons"].startswith("rank 0: communication.json is unreadable (not UTF-8 text")
    assert not [v for v in redis_values(redis_server.url) if "Traceback" in v], "a traceback reached Redis"


def test_a_rank_that_kills_its_worker_every_time_fails_its_root_alone(redis_server, workers, tmp_path):
    """A poison rank (its worker process dies under it each time) is given up after the retries the
    settings allow: its root fails with a named error, the other root and the worker carry on."""
    search = tmp_path / "captures"
    generate(search / "case_00_poison", "clean", seed=0, ranks=2, steps=24, layers=12, trace=False)
    generate(search / "case_01_good", "clean", seed=1, ranks=2, steps=3, trace=False)
    (worker,) = workers(1, env={"NPUPROF_MAX_RANK_RETRIES": "1"})
    archive = tmp_path / "archive"
    sweep_id = submit(redis_server.url, search, archive)
    kills = []

    def kill_rank_0_of_the_poison_root_when_it_runs() -> bool:
        for path in archive.glob(".captures__case_00_poison*/.ranks/rank_0.attempts.json"):
            state = json.loads(path.read_text())
            if state["started"] > len(kills) and state.get("ended", 0) < state["started"]:
                worker.freeze()  # it cannot end between this look and the kill
                state = json.loads(path.read_text())
                assert state.get("ended", 0) < state["started"], state
                worker.kill_child()
                worker.thaw()
                kills.append(state["started"])
        return len(kills) == 2

    wait_until(kill_rank_0_of_the_poison_root_when_it_runs, 120, "two deaths of the poison rank", interval=0.05)
    watch = run_cli("status", sweep_id, "--watch", "--json", "--broker", redis_server.url)
    assert watch.returncode == EXIT_PARTIAL, watch.stderr
    assert watch.result["totals"] == {"SUCCESS": 1, "FAILURE": 1}
    (poisoned,) = archive.glob("captures__case_00_poison*")
    failure = json.loads((poisoned / "failure.json").read_text())
    assert failure["kind"] == "worker_lost" and failure["phase"].endswith("(rank 0)")
    assert failure["error"].startswith("worker process died 2 times on rank 0 (")
    assert "last seen: stage " in failure["error"] and "the rank's input is " in failure["error"]
    assert [p.name for p in archive.glob("captures__case_01_good*/manifest.json")] == ["manifest.json"]
    assert worker.proc.poll() is None  # the worker serves on
    assert not list(archive.glob(".*")), "no work dir is left in the archive"


def test_two_sweeps_into_one_archive_are_refused_not_interleaved(redis_server, tmp_path):
    search = build_search_root(tmp_path / "captures", ["clean"], extra_samples=False, ranks=2, steps=2)
    archive = tmp_path / "archive"
    first = submit(redis_server.url, search, archive)  # no worker: it stays planning
    other = ("submit", "--search-root", str(search), "-o", str(archive), "--mode", "full", "--broker", redis_server.url)
    second = run_cli(*other)  # other options: another sweep into the same archive
    assert second.returncode == 2 and f"is being written by sweep {first} (planning)" in second.result["error"]
    assert submit(redis_server.url, search, archive) == first  # the same sweep again is not another one
    assert run_cli("cancel", first, "--broker", redis_server.url).returncode == 0
    assert run_cli(*other).returncode == 0


def test_sweep_records_expire_and_a_finished_one_is_forgotten_on_request(redis_server, tmp_path):
    search = build_search_root(tmp_path / "captures", ["clean"], extra_samples=False, ranks=2, steps=2)
    sweep_id = submit(redis_server.url, search, tmp_path / "archive")  # no worker: it stays planning
    client = redis.Redis.from_url(redis_server.url)
    key = f"npuprof:sweep:{sweep_id}"
    assert 29 * 86400 < client.ttl(key) <= 30 * 86400  # Redis memory stays bounded without anyone's help
    refused = run_cli("forget", sweep_id, "--broker", redis_server.url)
    assert refused.returncode == 2 and f"npuprof cancel {sweep_id}" in refused.result["error"]
    assert run_cli("cancel", sweep_id, "--broker", redis_server.url).returncode == 0
    gone = run_cli("forget", sweep_id, "--broker", redis_server.url)
    assert gone.returncode == 0 and gone.result["state"] == "forgotten", gone.stderr
    assert not client.exists(key)
    unknown = run_cli("status", sweep_id, "--broker", redis_server.url)
    assert unknown.returncode == 2 and f"no sweep {sweep_id!r}" in unknown.result["error"]


def test_results_are_forgotten_in_one_round_trip_as_forget_would(redis_server):
    """records.forget_results drops exactly the results AsyncResult.forget would (the backend's own keys,
    with npuprof's key prefix), many at once, and leaves the others."""
    from npuprof.workers import records
    from npuprof.workers.app import make_app

    app = make_app(redis_server.url)
    ids = [f"npuprof-rank-k-{rank}" for rank in range(100)]
    for task_id in [*ids, "kept"]:
        app.backend.store_result(task_id, {"status": "ok"}, "SUCCESS")
    assert app.AsyncResult(ids[0]).state == "SUCCESS"
    assert redis.Redis.from_url(redis_server.url).exists(f"npuprof:celery-task-meta-{ids[0]}")
    records.forget_results(app, ids)
    assert {app.AsyncResult(t).state for t in ids} == {"PENDING"}
    assert not redis.Redis.from_url(redis_server.url).exists(f"npuprof:celery-task-meta-{ids[0]}")
    assert app.AsyncResult("kept").state == "SUCCESS"


def test_a_crafted_message_naming_any_two_dirs_touches_neither(redis_server, workers, tmp_path):
    """reduce_root and analyze_rank published straight to the queue (as anyone who reaches the broker
    can), naming dirs no plan made — a victim dir as the output, another as the work dir: each task
    fails with a named refusal, and every dir is as it was (no removal, no move, no file written)."""
    from npuprof.workers.app import make_app
    from npuprof.workers.recovery import MARKERS, mark_work_dir

    storage = tmp_path / "storage"  # what the messages name (the fixtures' redis and logs live beside it)
    victim = storage / "victim"
    victim.mkdir(parents=True)
    (victim / "precious.txt").write_text("keep me")
    source = storage / ".source.work-x"  # shaped like a work dir, but no plan marked it
    source.mkdir()
    (source / "payload.txt").write_text("x")
    marked = storage / ".other.work-y"  # a real work dir, marked for another output
    mark_work_dir(marked, storage / "other", "y")
    before = sorted(str(p.relative_to(storage)) for p in storage.rglob("*"))
    workers(1)
    app = make_app(redis_server.url)
    root = str(storage / "r")  # inside the served storage: the work-dir marker is what refuses them
    inputs = {"requested_path": root, "root": root, "ranks": []}  # a root of no rank: nothing to wait for
    rank = {"rank_id": 0, "rank_dir": root, "rank_id_from": "dir"}
    sent = [
        app.send_task("npuprof.reduce_root", args=(str(source), str(victim), inputs, {}, [])),
        app.send_task("npuprof.reduce_root", args=(str(marked), str(victim), inputs, {}, [])),
        app.send_task("npuprof.reduce_root", args=(str(storage / "nowhere"), str(victim), inputs, {}, [])),
        app.send_task("npuprof.analyze_rank", args=(str(victim), rank, {}, ["normalize"])),
    ]
    for result in sent:
        with pytest.raises(Exception, match="refused"):
            result.get(timeout=60)
    assert sorted(str(p.relative_to(storage)) for p in storage.rglob("*")) == before
    assert (victim / "precious.txt").read_text() == "keep me"
    assert (marked / MARKERS).is_dir()
