"""Benchmark: the service sweep with 1 vs 2 workers, a resubmit, and the local sweep, in one run.

Starts its own redis-server and Celery workers (as the e2e tests do) and measures:
  * 20 synthetic roots: 1 worker vs 2 workers (target ≤ 0.6×),
  * one 16-rank root alone: 1 worker vs 2 workers (target ≤ 0.6×: one root spreads over workers),
  * resubmitting the finished 20-root sweep (target ≤ 5 % of the first run),
  * the local (process-pool) sweep of the same 20 roots, for the service's overhead.
Usage: ``python bench/sweep.py [--work DIR]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from service_harness import RedisServer, Worker  # noqa: E402

from npuprof.api import service  # noqa: E402
from npuprof.synth import generate  # noqa: E402

SCENARIOS = ["clean", "slow_rank", "ep_imbalance", "host_bubble", "mixed"]


def cli(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "npuprof.api.cli", *args], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def timed_sweep(broker: str, search: Path, archive: Path) -> float:
    """Submit and poll through the client API (a CLI process per poll would dominate short sweeps)."""
    started = time.perf_counter()
    sweep_id = service.submit([str(search)], str(archive), broker=broker)["sweep_id"]
    service.wait(sweep_id, broker=broker, poll=0.1, timeout=3600)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "out" / "sweep")
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    many, big = args.work / "many", args.work / "big"
    for index in range(20):
        generate(
            many / f"root_{index:02d}", SCENARIOS[index % len(SCENARIOS)], seed=index, steps=12, layers=28, trace=False
        )
    generate(big / "root_16", "clean", ranks=16, steps=40, layers=28, trace=False)

    results = {}
    for workers in (1, 2):
        redis_server = RedisServer(args.work / f"redis_{workers}")
        redis_server.start()
        pool = [Worker(f"b{workers}_{i}", redis_server.url, args.work / "logs").start() for i in range(workers)]
        try:
            results[f"many_{workers}w_s"] = round(
                timed_sweep(redis_server.url, many, args.work / f"archive_many_{workers}"), 2
            )
            results[f"big_{workers}w_s"] = round(
                timed_sweep(redis_server.url, big, args.work / f"archive_big_{workers}"), 2
            )
            if workers == 2:
                results["many_resubmit_s"] = round(timed_sweep(redis_server.url, many, args.work / "archive_many_2"), 2)
        finally:
            for worker in pool:
                worker.stop()
            redis_server.stop()
    started = time.perf_counter()
    cli(
        "sweep", "--search-root", str(many), "-o", str(args.work / "archive_local"), "--jobs", "2", "--progress", "none"
    )
    results["many_local_2jobs_s"] = round(time.perf_counter() - started, 2)
    results["many_2w_over_1w"] = round(results["many_2w_s"] / results["many_1w_s"], 3)
    results["big_2w_over_1w"] = round(results["big_2w_s"] / results["big_1w_s"], 3)
    results["resubmit_share_of_first"] = round(results["many_resubmit_s"] / results["many_2w_s"], 3)
    results["service_over_local"] = round(results["many_2w_s"] / results["many_local_2jobs_s"], 3)
    results["targets"] = {"many_2w_over_1w": "<= 0.6", "big_2w_over_1w": "<= 0.6", "resubmit_share_of_first": "<= 0.05"}
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
