"""docs/service.md's "Run it as a service" block, run as written against a real Redis: its exports set,
its signing keys made, its worker started with its options (Celery's pass through), its submit, status,
flower, fetch, cancel and forget lines run in order. Only what names a machine changes: /mnt/… becomes
a temp dir, ~ a temp home, the Redis its test's own (no password: the harness's), the port a free one."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import redis
from conftest import QWEN_TRAINING, copy_sample
from helpers.doc_commands import DocCommand, doc_commands
from service_harness import free_port, redis_values, wait_until

from npuprof.synth import generate

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("service")]


def _service_block() -> list[DocCommand]:
    """The service guide's first bash block: the commands of running it as a service, in order."""
    commands = [c for c in doc_commands(("bash",)) if c.file == "docs/service.md"]
    first = commands[0].line
    return [c for c in commands if c.line < first + 40 and not c.text.startswith(("pip ", "redis-server", "umask"))]


def _filled(text: str, home: Path, mnt: Path, values: dict[str, str]) -> str:
    text = text.replace("~/", f"{home}/").replace("/mnt/", f"{mnt}/")
    return re.sub(r"\b(SWEEP_ID|5555)\b", lambda m: values[m.group(1)], text)


def _served(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthcheck", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def test_the_service_guide_runs_as_written(redis_server, tmp_path):
    home, mnt = tmp_path / "home", tmp_path / "mnt"
    for storage in ("lustre/profiles", "nfs"):
        (mnt / storage).mkdir(parents=True)
    generate(mnt / "lustre" / "profiles" / "case_clean", "clean", seed=0, trace=False)
    copy_sample(QWEN_TRAINING, mnt / "lustre" / "profiles" / "qwen3_step13")  # the root fetch --root names
    home.mkdir()
    # the block's Redis lines, done by the harness: the broker URL in a file only its owner reads
    (home / ".npuprof-broker").write_text(redis_server.url + "\n")
    (home / ".npuprof-broker").chmod(0o600)
    env = {**os.environ, "HOME": str(home)}
    env.pop("NPUPROF_BROKER_URL", None)
    values = {"5555": str(free_port())}
    background: list[subprocess.Popen] = []
    ran = []
    try:
        for command in _service_block():
            text = _filled(command.text, home, mnt, values)
            argv = shlex.split(text, comments=True)
            if argv[0] == "export":  # NAME=value pairs, for every later command
                env.update(pair.split("=", 1) for pair in argv[1:])
                continue
            assert argv[0] == "npuprof", command
            ran.append(argv[1])
            full = [sys.executable, "-m", "npuprof.api.cli", *argv[1:]]
            if argv[1] in ("worker", "flower"):  # long-running: started, checked, stopped at the end
                log = tmp_path / f"{argv[1]}.log"
                proc = subprocess.Popen(
                    full,
                    env=env,
                    cwd=tmp_path,
                    stdout=open(log, "wb"),
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                background.append(proc)
                if argv[1] == "worker":
                    wait_until(lambda: "ready." in log.read_text(errors="replace"), 90, f"{command} to be ready")
                else:
                    wait_until(lambda: _served(int(values["5555"])), 60, f"{command} to serve")
                continue
            run = subprocess.run(full, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
            assert run.returncode == 0, f"{command}\n{run.stderr[-2000:]}"
            if argv[1] == "submit":
                values["SWEEP_ID"] = json.loads(run.stdout)["sweep_id"]
            if argv[1] == "status" and "--json" in argv:
                assert json.loads(run.stdout)["state"] == "done", run.stdout[-500:]
    finally:
        for proc in background:
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in background:
            proc.wait(timeout=60)
    assert ran == ["signing-keys", "worker", "submit", "status", "status", "flower", "fetch", "cancel", "forget"]
    fetched = tmp_path / "results"
    assert (fetched / "sweep_class_rollup.csv").is_file()
    assert any(p.name == "analysis_summary.json" for p in fetched.rglob("*"))  # the root's summaries
    keys = [key.decode() for key in redis.Redis.from_url(redis_server.url).scan_iter(count=1000)]
    values_left = [v for v in redis_values(redis_server.url) if values["SWEEP_ID"] in v]
    assert not [k for k in keys if values["SWEEP_ID"] in k] and not values_left  # forgotten, queued messages too
