"""Fixtures that start the real service parts; each test gets its own Redis and workers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from service_harness import RedisServer, Worker

# short, so a lost message comes back, and the supervisor steps in, within a test
E2E_ENV = {
    "NPUPROF_VISIBILITY_TIMEOUT": "8",
    "NPUPROF_SUPERVISE_SECONDS": "1",
    "NPUPROF_RECOVER_AFTER": "4",
    "NPUPROF_MERGE_STALE_SECONDS": "6",
}


@pytest.fixture
def redis_server(tmp_path):
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed (.ci/run installs it)")
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def workers(redis_server, tmp_path):
    started: list[Worker] = []

    def start(
        count: int = 2, queues: str = "npuprof", env: dict | None = None, storage: tuple[Path, ...] | None = None
    ) -> list[Worker]:
        """``count`` workers on ``queues``, serving ``storage`` (default: the test's tmp dir)."""
        launched = [
            Worker(
                f"w{len(started) + index + 1}",
                redis_server.url,
                tmp_path / "logs",
                {**E2E_ENV, **(env or {})},
                queues,
                (tmp_path,) if storage is None else storage,
            ).launch()
            for index in range(count)
        ]
        started.extend(launched)
        for worker in launched:
            worker.wait_ready()
        return started

    yield start
    for worker in started:
        worker.request_stop()
    for worker in started:
        worker.stop()
