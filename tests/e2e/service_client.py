"""The service as a user drives it, for the e2e tests: a search root of captures, submit, status, waits."""

from __future__ import annotations

from pathlib import Path

from conftest import QWEN_TRAINING, copy_sample, run_cli
from service_harness import wait_until

from npuprof.pipeline.errors import EXIT_PARTIAL
from npuprof.synth import generate


def build_search_root(base: Path, scenarios: list[str], extra_samples: bool = True, **synth) -> Path:
    for index, name in enumerate(scenarios):
        generate(base / f"case_{index:02d}_{name}", name, seed=index, **synth)
    if extra_samples:
        copy_sample(QWEN_TRAINING, base / "qwen3_step13")
        bad = base / "broken_case" / "rank_0" / "ASCEND_PROFILER_OUTPUT"
        bad.mkdir(parents=True)
        (bad / "kernel_details.csv").write_text("Name,Type\nx,y\n")
    return base


def submit(broker: str, search: Path, archive: Path, *options: str) -> str:
    """Submit a sweep of ``search`` into ``archive`` (``options``: more submit options); its id."""
    run = run_cli("submit", "--search-root", str(search), "-o", str(archive), "--broker", broker, *options)
    assert run.returncode == 0, run.stderr
    return run.result["sweep_id"]


def status(broker: str, sweep_id: str) -> dict:
    run = run_cli("status", sweep_id, "--json", "--broker", broker)
    assert run.returncode == 0, run.stderr
    return run.result


def wait_state(broker: str, sweep_id: str, states: tuple[str, ...], timeout: float = 120) -> dict:
    """The sweep's status once its state is one of ``states``."""
    return wait_until(
        lambda: (s := status(broker, sweep_id))["state"] in states and s, timeout, f"sweep {sweep_id} {states}", 1.0
    )


def wait_done(broker: str, sweep_id: str, timeout: float = 240) -> dict:
    """The final status, waited for as a user does (``status --watch``: one record read a poll)."""
    run = run_cli("status", sweep_id, "--watch", "--json", "--interval", "0.5", "--broker", broker, timeout=timeout)
    assert run.returncode in (0, EXIT_PARTIAL), run.stderr
    assert run.result["state"] == "done", run.result
    return run.result
