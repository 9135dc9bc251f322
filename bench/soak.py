"""Soak: many small roots through two workers, with a Redis restart and a ``kill -9`` of a worker
in the middle; then the same roots through the local sweep, and the two rollups compared.

Prints one JSON object: roots, wall seconds of both sweeps, whether every root is ok, roots analyzed
twice into the archive (must be 0), whether the rollups are identical, ``status`` answering during
the run, Redis peak memory and its key count at the end. Not a test (it runs for minutes).
Usage: ``python bench/soak.py [--roots 1000] [--work DIR]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import pandas as pd
import redis

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from service_harness import RedisServer, Worker  # noqa: E402

from npuprof.api import service  # noqa: E402
from npuprof.pipeline.sweep.local import run_sweep  # noqa: E402
from npuprof.synth import generate  # noqa: E402

VARYING = ["output_dir", "elapsed_s"]  # where and how fast: everything else must agree
# a killed worker's message comes back after this (production: 6 h, above the longest task)
WORKER_ENV = {"NPUPROF_VISIBILITY_TIMEOUT": "30"}


def build(search: Path, count: int) -> None:
    for index in range(count):
        generate(search / f"r{index:04d}", "clean", seed=index, ranks=1, steps=2, layers=2, trace=False)


def rollup(archive: Path) -> pd.DataFrame:
    frame = pd.read_csv(archive / "sweep_class_rollup.csv").drop(columns=VARYING)
    return frame.sort_values("root").reset_index(drop=True)


def service_sweep(work: Path, search: Path, count: int) -> dict:
    server = RedisServer(work / "redis")
    server.start()
    workers = [Worker(f"w{i}", server.url, work / "logs", WORKER_ENV).start() for i in (1, 2)]
    archive = work / "service_archive"
    started = time.perf_counter()
    sweep_id = service.submit([str(search)], str(archive), broker=server.url)["sweep_id"]
    polls, failed_polls, disturbed = 0, 0, {"redis_restart": False, "worker_killed": False}
    while True:
        try:
            state = service.status(sweep_id, broker=server.url)
            polls += 1
        except Exception:  # a poll while Redis restarts: counted, never fatal
            failed_polls += 1
            time.sleep(1.0)
            continue
        done = state["totals"].get("SUCCESS", 0)
        if not disturbed["redis_restart"] and done >= count // 3:
            server.restart()
            disturbed["redis_restart"] = True
        elif not disturbed["worker_killed"] and done >= 2 * count // 3:
            workers[0].kill_main()
            workers[0] = Worker("w3", server.url, work / "logs", WORKER_ENV).start()
            disturbed["worker_killed"] = True
        if state["state"] == "done":
            break
        time.sleep(1.0)
    seconds = time.perf_counter() - started
    client = redis.Redis.from_url(server.url)
    memory, keys = client.info("memory"), client.dbsize()
    for worker in workers:
        worker.stop()
    server.stop()
    manifests = list(archive.glob("*/manifest.json"))
    return {
        "seconds": round(seconds, 1),
        "totals": state["totals"],
        "roots_in_archive": len(manifests),
        "status_polls_ok": polls,
        "status_polls_failed_during_restart": failed_polls,
        "disturbed": disturbed,
        "redis_used_memory_peak_mb": round(memory["used_memory_peak"] / 2**20, 1),
        "redis_keys_at_end": keys,
        "archive": archive,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--roots", type=int, default=1000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/npuprof-soak"))
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    search = args.work / "search"
    build(search, args.roots)
    result = service_sweep(args.work, search, args.roots)
    started = time.perf_counter()
    run_sweep([str(search)], args.work / "local_archive", jobs=2)
    local_seconds = time.perf_counter() - started
    archive = result.pop("archive")
    same = rollup(archive).equals(rollup(args.work / "local_archive"))
    twice = sum(1 for p in archive.iterdir() if p.is_dir() and "-dup" in p.name) + len(list(archive.glob(".*")))
    print(
        json.dumps(
            {
                "roots": args.roots,
                **result,
                "local_sweep_seconds": round(local_seconds, 1),
                "rollup_identical_to_local": bool(same),
                "leftover_work_dirs": twice,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
