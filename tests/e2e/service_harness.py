"""Real service parts for end-to-end tests: a private redis-server, Celery worker processes, Flower."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


class RedisServer:
    """A redis-server of the test's own on a free loopback port, with an append-only file so a
    restart keeps the queue (what a production broker is configured to do)."""

    def __init__(self, workdir: Path, password: str | None = None) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.password = password
        self.url = f"redis://{':' + password + '@' if password else ''}127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--dir",
                str(self.workdir),
                *(["--requirepass", self.password] if self.password else []),
            ],
            stdout=open(self.workdir / "redis.log", "ab"),
            stderr=subprocess.STDOUT,
        )
        wait_until(self._ping, 20, "redis-server to answer")

    def _ping(self) -> bool:
        try:
            return redis.Redis(port=self.port, password=self.password, socket_connect_timeout=0.5).ping()
        except redis.exceptions.ConnectionError:
            return False

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            # SIGTERM is Redis's own clean shutdown (the AOF is fsynced: nothing lost); a SHUTDOWN sent
            # by redis-py waits seconds in its retries to reconnect to the server that just left
            self.proc.terminate()
            self.proc.wait(timeout=20)
        self.proc = None

    def restart(self, down_seconds: float = 2.0) -> None:
        self.stop()
        time.sleep(down_seconds)
        self.start()


class Worker:
    """One ``npuprof worker`` process (Celery prefork, one child)."""

    def __init__(
        self,
        name: str,
        broker: str,
        logdir: Path,
        env: dict | None = None,
        queues: str = "npuprof",
        storage: tuple[Path, ...] = (),
    ) -> None:
        self.name = name
        self.log = logdir / f"{name}.log"
        self.env = {**os.environ, "NPUPROF_BROKER_URL": broker, **(env or {})}
        self.command = [  # through `npuprof worker`, as a user starts one
            sys.executable,
            "-m",
            "npuprof.api.cli",
            "worker",
            "--broker",
            broker,
            "-Q",
            queues,
            "-c",
            "1",
            "-n",
            f"{name}@%h",
            "--loglevel",
            "INFO",
            "--without-gossip",
            "--without-mingle",
            *(arg for directory in storage for arg in ("--storage", str(directory))),
        ]
        self.proc: subprocess.Popen | None = None

    def launch(self) -> "Worker":
        """Start the process without waiting: workers launched together start up side by side."""
        logdir = self.log.parent
        logdir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            self.command, env=self.env, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT, start_new_session=True
        )
        return self

    def wait_ready(self) -> "Worker":
        wait_until(lambda: "ready." in self.log.read_text(errors="replace"), 60, f"worker {self.name} to be ready")
        return self

    def start(self) -> "Worker":
        return self.launch().wait_ready()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def child_pids(self) -> list[int]:
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout.split()
        return [int(p) for p in out]

    def freeze(self) -> None:
        """SIGSTOP the worker and its pool: nothing it runs can end (or start) until ``thaw``; a test
        that must act while a task is in flight freezes first, then checks, then acts."""
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.killpg(self.proc.pid, signal.SIGCONT)

    def task_events(self, task: str) -> list[tuple[str, str]]:
        """(task id, event) of every log line about a task named ``task`` (received, succeeded, ...)."""
        return re.findall(rf"Task {re.escape(task)}\[([^\]]+)\] (\w+)", self.log_text())

    def kill_main(self) -> None:
        """kill -9 of the worker and its pool: its unacknowledged message comes back after the visibility timeout."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=20)

    def kill_child(self) -> None:
        """kill -9 of the pool child only: with reject_on_worker_lost the task is requeued at once."""
        for pid in self.child_pids():
            os.kill(pid, signal.SIGKILL)

    def request_stop(self) -> None:
        """SIGTERM (Celery's warm shutdown) without waiting: workers asked together stop side by side."""
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        self.request_stop()
        if self.proc and self.proc.poll() is None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def redis_values(url: str) -> list[str]:
    """Every string value and hash / list member in a Redis (what a client could read back)."""
    client = redis.Redis.from_url(url)
    values = []
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        if kind == b"string":
            values.append(client.get(key).decode("utf-8", "replace"))
        elif kind == b"hash":
            values += [v.decode("utf-8", "replace") for v in client.hvals(key)]
        elif kind == b"list":
            values += [v.decode("utf-8", "replace") for v in client.lrange(key, 0, -1)]
    return values
