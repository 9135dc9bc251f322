"""Signed task messages (Celery's ``auth`` serializer): a signing cluster runs a sweep; a message that is
unsigned, or signed by a key its store does not trust, is refused undecoded and runs nothing."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
import redis
from conftest import run_cli
from service_client import build_search_root, wait_done
from service_harness import wait_until

from npuprof.pipeline.sweep.rollup import root_status
from npuprof.workers import records
from npuprof.workers.app import make_app

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("service")]

SEND_PLAN = """
import sys
from npuprof.workers import records
from npuprof.workers.app import make_app
app = make_app(sys.argv[1])
app.send_task("npuprof.plan_sweep", args=("forged", [sys.argv[2]], sys.argv[3], {}))
"""


def _signing_env(directory) -> dict:
    run = run_cli("signing-keys", str(directory))
    assert run.returncode == 0, run.stderr
    return {k: v for k, v in run.result.items() if k.startswith("NPUPROF_SIGNING_")}


def test_a_signing_cluster_sweeps_and_refuses_unsigned_and_foreign_messages(redis_server, workers, tmp_path):
    env = _signing_env(tmp_path / "keys")
    assert stat.S_IMODE((tmp_path / "keys" / "signing_key.pem").stat().st_mode) == 0o600
    again = run_cli("signing-keys", str(tmp_path / "keys"))
    assert again.returncode == 2 and "signing files are not replaced" in again.stderr
    foreign = _signing_env(tmp_path / "other-keys")  # a valid key, but not in the cluster's store
    # the cluster's certificate is public: an impostor signs with its own key under the cluster's name
    impostor = {**foreign, "NPUPROF_SIGNING_CERT": env["NPUPROF_SIGNING_CERT"]}

    search = build_search_root(tmp_path / "captures", ["clean"], extra_samples=False, steps=6, trace=False)
    (worker,) = workers(1, env=env)
    run = run_cli(
        "submit", "--search-root", str(search), "-o", str(tmp_path / "archive"), "--broker", redis_server.url, env=env
    )
    assert run.returncode == 0, run.stderr
    final = wait_done(redis_server.url, run.result["sweep_id"])  # status reads records: no signing needed
    assert final["totals"] == {"SUCCESS": 1}
    assert [root_status(p) for p in (tmp_path / "archive").iterdir() if p.is_dir() and p.name != "sweep_data"] == ["ok"]
    sweep_id = run.result["sweep_id"]
    record = records.load(sweep_id, redis_server.url)
    task_ids = [record["plan_id"], record["merge_id"]]
    task_ids += [task for entry in record["roots"] for task in (*entry["rank_ids"], entry["reduce_id"])]
    assert run_cli("forget", sweep_id, "--broker", redis_server.url).returncode == 0
    left = [key.decode() for key in redis.Redis.from_url(redis_server.url).scan_iter("npuprof:*")]
    assert not [k for k in left if sweep_id in k or any(t in k for t in task_ids)], left  # nothing of it stays

    forged_archives = [tmp_path / f"forged-{name}" for name in ("unsigned", "foreign", "impostor")]
    unsigned = make_app(redis_server.url)  # this process has no signing settings: plain JSON
    unsigned.send_task("npuprof.plan_sweep", args=("forged", [str(search)], str(forged_archives[0]), {}))
    for keys, archive in zip((foreign, impostor), forged_archives[1:]):
        sent = subprocess.run(
            [sys.executable, "-c", SEND_PLAN, redis_server.url, str(search), str(archive)],
            env={**os.environ, **keys},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert sent.returncode == 0, sent.stderr
    refusals = ("untrusted content of type json", "Unknown certificate", "Bad signature")
    wait_until(
        lambda: all(refusal in worker.log_text() for refusal in refusals), 30, "the worker to refuse the forgeries"
    )
    assert not any(path.exists() for path in forged_archives)  # neither plan ran
    assert "npuprof.plan_sweep[" not in worker.log_text().split("sweep_class_rollup")[-1]


def test_half_configured_signing_is_named_before_celery_starts(tmp_path):
    run = run_cli(
        "worker", "--storage", str(tmp_path), "--broker", "redis://127.0.0.1:1/0", env={"NPUPROF_SIGNING_KEY": "/x"}
    )
    assert run.returncode == 2 and "NPUPROF_SIGNING_CERT, NPUPROF_SIGNING_CERT_STORE not set" in run.stderr
    assert "Traceback" not in run.stderr
    assert json.loads(run.stdout)["kind"] == "usage_error"
