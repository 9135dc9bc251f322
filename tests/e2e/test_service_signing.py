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


REPLAY_PLAN = """
import json, sys
from npuprof.pipeline.options import AnalyzeOptions
from npuprof.workers.app import make_app
url, sweep_id, roots, archive, plan_id = sys.argv[1:]
args = (sweep_id, json.loads(roots), archive, AnalyzeOptions().to_dict())
make_app(url).send_task("npuprof.plan_sweep", args=args, task_id=plan_id)
"""


SWAP_ID = """
import json, sys
import redis
from npuprof.workers.app import make_app
url, search, archive = sys.argv[1:]
args = ("swapped", [search], archive, {})
make_app(url).send_task("npuprof.plan_sweep", args=args, task_id="signed-id", queue="held")
client = redis.Redis.from_url(url)
message = json.loads(client.rpop("npuprof:held"))  # as anyone who reaches the broker could read it
message["headers"]["id"] = "another-id"
message["properties"]["delivery_info"]["routing_key"] = "npuprof"
client.lpush("npuprof:npuprof", json.dumps(message))
"""

HOLD_MESSAGE = """
import sys
import redis
from npuprof.workers.app import make_app
url, sweep_id = sys.argv[1:]
make_app(url).send_task("npuprof.watch_merge", args=(sweep_id,), task_id="copied-id", queue="held")
sys.stdout.write(redis.Redis.from_url(url).rpop("npuprof:held").decode())  # its bytes, as the broker holds them
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
    # the impostor's refusal says why (Celery's own check caught a module, not an exception class, and
    # logged a TypeError in its place)
    assert "Bad signature: InvalidSignature" in worker.log_text()
    assert "catching classes that do not inherit from BaseException" not in worker.log_text()
    assert "npuprof.plan_sweep[" not in worker.log_text().split("sweep_class_rollup")[-1]

    # the plan message again, signed as the client signed it (a copy of it replayed): no record waits for it
    (tmp_path / "archive" / ".npuprof-service-sweep.json").unlink(missing_ok=True)
    args = [redis_server.url, sweep_id, json.dumps([str(search)]), str(tmp_path / "archive"), record["plan_id"]]
    sent = subprocess.run([sys.executable, "-c", REPLAY_PLAN, *args], env={**os.environ, **env}, capture_output=True)
    assert sent.returncode == 0, sent.stderr
    wait_until(lambda: f"refused a plan of sweep {sweep_id}" in worker.log_text(), 30, "the replay refused")
    assert "no sweep record waits for it" in worker.log_text()

    # a signed message sent again under another id (its headers are not signed): its body says otherwise
    swap = subprocess.run(
        [sys.executable, "-c", SWAP_ID, redis_server.url, str(search), str(tmp_path / "swapped")],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert swap.returncode == 0, swap.stderr
    refused = "its signed body was sent as id 'signed-id', its headers say 'another-id'"
    wait_until(lambda: refused in worker.log_text(), 30, "the message under another id refused")
    assert not (tmp_path / "swapped").exists()
    assert records.load(sweep_id, redis_server.url) is None
    assert not (tmp_path / "archive" / ".npuprof-service-sweep.json").exists()  # it touched nothing


def test_half_configured_signing_is_named_before_celery_starts(tmp_path):
    run = run_cli(
        "worker", "--storage", str(tmp_path), "--broker", "redis://127.0.0.1:1/0", env={"NPUPROF_SIGNING_KEY": "/x"}
    )
    assert run.returncode == 2 and "NPUPROF_SIGNING_CERT, NPUPROF_SIGNING_CERT_STORE not set" in run.stderr
    assert "Traceback" not in run.stderr
    assert json.loads(run.stdout)["kind"] == "usage_error"


def test_a_key_others_read_or_a_store_others_write_is_refused(tmp_path):
    """A key others can read is no secret, a store others can write trusts what they add: a process given
    either refuses to start (as ssh refuses such a key), in one line that says how to fix it."""
    env = _signing_env(tmp_path / "keys")
    worker = ["worker", "--storage", str(tmp_path), "--broker", "redis://127.0.0.1:1/0"]
    key, store = tmp_path / "keys" / "signing_key.pem", tmp_path / "keys" / "trusted_certs"
    key.chmod(0o644)
    run = run_cli(*worker, env=env)
    assert run.returncode == 2 and f"others may read it (chmod 600 {key})" in run.stderr, run.stderr
    key.chmod(0o600)
    for loose in (store, store / "signing_cert.pem"):
        loose.chmod(0o777)
        run = run_cli(*worker, env=env)
        assert run.returncode == 2 and f"others may write {loose}" in run.stderr, run.stderr
        loose.chmod(0o755)


def test_signing_keys_never_write_through_a_planted_link(tmp_path):
    """A dangling link where the certificate goes is not followed: nothing is written, it is named."""
    keys, target = tmp_path / "keys", tmp_path / "elsewhere.pem"
    keys.mkdir()
    (keys / "signing_cert.pem").symlink_to(target)
    run = run_cli("signing-keys", str(keys))
    assert run.returncode == 2 and "signing_cert.pem exists: signing files are not replaced" in run.stderr
    assert not target.exists() and sorted(p.name for p in keys.iterdir()) == ["signing_cert.pem"]


def test_a_copy_of_a_signed_message_that_ran_is_refused(redis_server, workers, tmp_path):
    """Its bytes, read off the broker and pushed to the queue twice: the first runs, the copy is refused
    by its spent nonce (its signature, name, id and age are all still good)."""
    env = _signing_env(tmp_path / "keys")
    (worker,) = workers(1, env=env)
    held = subprocess.run(
        [sys.executable, "-c", HOLD_MESSAGE, redis_server.url, "no-such-sweep"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert held.returncode == 0, held.stderr
    message = json.loads(held.stdout)
    message["properties"]["delivery_info"]["routing_key"] = "npuprof"
    client = redis.Redis.from_url(redis_server.url)
    client.lpush("npuprof:npuprof", json.dumps(message))
    wait_until(lambda: "npuprof.watch_merge[copied-id] succeeded" in worker.log_text(), 30, "the message to run")
    assert "already ran" not in worker.log_text()
    client.lpush("npuprof:npuprof", json.dumps(message))
    refused = "refused a message for npuprof.watch_merge[copied-id]: it already ran (a copy sent again)"
    wait_until(lambda: refused in worker.log_text(), 30, "the copy refused")
    assert worker.log_text().count("npuprof.watch_merge[copied-id] succeeded") == 1
