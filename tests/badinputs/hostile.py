"""A red-team corpus: small files built to take the machine (memory, time) or to smuggle something past
npuprof. Each case says what npuprof must do instead: a named error or a degraded note, and a peak
memory under ``MEMORY_BOUND`` (``test_hostile.py`` measures the CLI process's own peak).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from npuprof.synth import generate

MEMORY_BOUND = 1 << 30  # bytes of peak RSS for any case
RANK0 = "*_1000_*_ascend_pt"  # synth's rank 0 dir


@dataclass
class Hostile:
    """One hostile root and what npuprof must do with it."""

    name: str
    build: Callable[[Path], Path]  # tmp dir -> the root given to `npuprof analyze`
    exit_code: int
    says: str  # in the one-line error, or in the result's warnings / notes
    extra_args: tuple[str, ...] = ()


def _synth(tmp: Path, export: str = "text", steps: int = 4) -> Path:
    root = tmp / "root"
    generate(root, "clean", ranks=2, steps=steps, layers=4, seed=0, export=export)
    return root


def _output_dir(root: Path) -> Path:
    return next(root.glob(f"{RANK0}/ASCEND_PROFILER_OUTPUT"))


def deep_trace(depth: int) -> Callable[[Path], Path]:
    """Rank 0's trace_view.json: one event whose args nest ``depth`` lists (80 KB for 40,000)."""

    def build(tmp: Path) -> Path:
        root = _synth(tmp)
        head = b'[{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": "1", "dur": 1, "args": {"name": '
        (_output_dir(root) / "trace_view.json").write_bytes(head + b"[" * depth + b"]" * depth + b"}}]")
        return root

    return build


def deep_auxiliary(name: str, depth: int = 100_000) -> Callable[[Path], Path]:
    """Rank 0's ``name`` (an auxiliary JSON file) nested ``depth`` lists deep."""

    def build(tmp: Path) -> Path:
        root = _synth(tmp)
        (_output_dir(root) / name).write_bytes(b'{"x": ' + b"[" * depth + b"]" * depth + b"}")
        return root

    return build


def long_db_string(mebibytes: int) -> Callable[[Path], Path]:
    """Rank 0's profiler db: one STRING_IDS value of ``mebibytes`` MiB named by every task's inputFormats."""

    def build(tmp: Path) -> Path:
        root = _synth(tmp, export="db", steps=12)
        db = next(_output_dir(root).glob("ascend_pytorch_profiler_*.db"))
        con = sqlite3.connect(db)
        with con:
            big = con.execute("SELECT max(id) + 1 FROM STRING_IDS").fetchone()[0]
            con.execute("INSERT INTO STRING_IDS (id, value) VALUES (?, ?)", (big, "ND" * (mebibytes << 19)))
            con.execute("UPDATE COMPUTE_TASK_INFO SET inputFormats = ?", (big,))
        con.close()
        return root

    return build


def garbage_step_trace(tmp: Path) -> Path:
    """Rank 0's step_trace_time.csv: 300 random bytes."""
    root = _synth(tmp)
    (_output_dir(root) / "step_trace_time.csv").write_bytes(bytes(range(256)) + bytes(range(44)))
    return root


def link_loop(tmp: Path) -> Path:
    """Two links beside the rank dirs that point at each other."""
    root = _synth(tmp)
    (root / "loop_a").symlink_to("loop_b")
    (root / "loop_b").symlink_to("loop_a")
    return root


HOSTILE: list[Hostile] = [
    Hostile("trace_view_nested_40k", deep_trace(40_000), 8, "nested deeper than 128 levels"),
    Hostile("trace_view_nested_100k", deep_trace(100_000), 8, "nested deeper than 128 levels"),
    Hostile("db_string_2mib_in_every_row", long_db_string(2), 0, "STRING_IDS values longer than 8192 characters"),
    Hostile("db_string_20mib_in_every_row", long_db_string(20), 0, "STRING_IDS values longer than 8192 characters"),
    Hostile("communication_json_nested_100k", deep_auxiliary("communication.json"), 8, "communication.json"),
    Hostile("matrix_json_nested_100k", deep_auxiliary("communication_matrix.json"), 8, "communication_matrix.json"),
    Hostile("step_trace_time_garbage", garbage_step_trace, 8, "step_trace_time.csv is unreadable"),
    Hostile("link_loop_beside_the_ranks", link_loop, 0, "loop_a: a link that leads nowhere"),
]
