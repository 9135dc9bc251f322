"""The red-team commands through the real CLI: a query built to take the machine and a rule setting
built to blow up end in a named exit code with no traceback, the CLI process's peak memory under the
corpus's bound at the defaults a user runs with (issue 71: a 744 MB format width, a 2 GB alias
expansion; a query result or sort that the limits must stop short of the bound)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from badinputs.hostile import ALIAS_BOMB, MEASURE, MEMORY_BOUND

from npuprof.pipeline.runner import analyze
from npuprof.pipeline.sweep.local import run_sweep
from npuprof.synth import generate

SLOW = "slow_rank_suspected"


@dataclass(frozen=True)
class HostileCommand:
    """One command and what npuprof must do with it: ``{analysis}`` / ``{archive}`` in ``args`` name a
    finished analysis and a sweep archive."""

    name: str
    args: tuple[str, ...]
    exit_code: int
    says: str  # in stderr


def _set(name: str, setting: str, says: str) -> HostileCommand:
    return HostileCommand(name, ("diagnose", "{analysis}", "--set", f"{SLOW}.{setting}"), 2, says)


def _query(name: str, sql: str, exit_code: int, says: str, *options: str) -> HostileCommand:
    return HostileCommand(name, ("query", "{archive}", sql, *options), exit_code, says)


STOPPED = "query stopped: it needs more than"
COMMANDS = [
    _set("set_format_width", "text=x {wait_ms:>600000000}", "not a format this text takes"),
    _set("set_alias_bomb", f"dixon_q_critical={ALIAS_BOMB}", "YAML aliases are not taken"),
    _query("query_runs_on", "SELECT count(*) FROM range(10_000_000_000_000)", 2, "stopped after 2 s", "--timeout", "2"),
    _query("query_huge_lists", "SELECT list(range) FROM range(300_000_000)", 2, STOPPED),
    _query("query_huge_sort", "SELECT * FROM range(200_000_000) ORDER BY random()", 2, STOPPED),
    _query("query_result_past_its_share", "SELECT repeat('x', 1000) FROM range(2_000_000)", 2, "a quarter of its 768"),
    # the largest result the defaults hand back (183 MB of text): printed, not refused, under the bound
    _query("query_result_within_its_share", "SELECT repeat('x', 100) FROM range(1_800_000)", 0, ""),
    _query("query_copy_in_explain", "EXPLAIN ANALYZE COPY (SELECT 1) TO '{archive}/x.csv'", 2, "not a query"),
]


@pytest.fixture(scope="module")
def targets(tmp_path_factory) -> dict[str, str]:
    """A finished analysis of a planted slow rank, and a one-root sweep archive."""
    base = tmp_path_factory.mktemp("hostile_commands")
    generate(base / "root", "slow_rank", seed=0, steps=3, layers=2, trace=False)
    analyze(base / "root", base / "analysis", jobs=1)
    run_sweep([str(base / "root")], base / "archive", jobs=1)
    return {"analysis": str(base / "analysis"), "archive": str(base / "archive")}


@pytest.mark.parametrize("case", COMMANDS, ids=[c.name for c in COMMANDS])
def test_a_hostile_command_ends_named_within_the_memory_bound(case: HostileCommand, targets: dict[str, str]):
    args = [arg.replace("{analysis}", targets["analysis"]) for arg in case.args]
    args = [arg.replace("{archive}", targets["archive"]) for arg in args]
    tests_dir = str(Path(__file__).resolve().parents[1])
    measured = subprocess.run(
        [sys.executable, "-c", MEASURE, tests_dir, *args], capture_output=True, text=True, timeout=600
    )
    assert measured.returncode == 0, measured.stderr
    code, out, err, peak = json.loads(measured.stdout)
    assert "Traceback" not in err, err[-2000:]
    assert code == case.exit_code, (code, err[-2000:])
    assert case.says in err, err[-2000:]
    if code == 0:
        assert json.loads(out)["row_count"] > 0
    assert peak < MEMORY_BOUND, f"peak RSS {peak / 1e6:.0f} MB"
