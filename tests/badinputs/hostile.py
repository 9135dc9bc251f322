"""A red-team corpus: small files built to take the machine (memory, time) or to smuggle something past
npuprof. Each case says what npuprof must do instead: a named error or a degraded note, and a peak memory
under ``MEMORY_BOUND``, the CLI process's own peak (``run_measured``, run in a fresh interpreter by
``MEASURE``).
"""

from __future__ import annotations

import os
import resource
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from npuprof.synth import generate

MEMORY_BOUND = 1 << 30  # bytes of peak RSS for any case
RANK0 = "*_1000_*_ascend_pt"  # synth's rank 0 dir
# a YAML value of nine levels of nine references each: 9^9 (387 M) strings when expanded
ALIAS_BOMB = (
    "{a: &a [x,x,x,x,x,x,x,x,x], "
    + ", ".join(f"{c}: &{c} [{','.join([f'*{p}'] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi"))
    + "}"
)


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


def edited_kernel(column: str, change: Callable[[float], float], row: int = 100) -> Callable[[Path], Path]:
    """Rank 0's kernel_details.csv with one row's ``column`` (a number of µs) changed."""

    def build(tmp: Path) -> Path:
        import pandas as pd

        root = _synth(tmp)
        path = _output_dir(root) / "kernel_details.csv"
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        name = next(c for c in frame.columns if c.startswith(column))
        frame.loc[row, name] = f"{change(float(frame.loc[row, name])):.3f}"
        frame.to_csv(path, index=False)
        return root

    return build


def config_field(field: str, value: object) -> Callable[[Path], Path]:
    """A config.json beside the ranks whose ``field`` holds ``value`` (JSON text)."""

    def build(tmp: Path) -> Path:
        root = _synth(tmp)
        (root / "config.json").write_text(f'{{"num_hidden_layers": 4, "{field}": {value}}}')
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
    # security V (issue 71): a 1,000-level nesting, a corrupt duration or timestamp, config fields out of range
    Hostile("communication_json_nested_1000", deep_auxiliary("communication.json", 1_000), 8, "communication.json"),
    Hostile("kernel_lasting_5000_s", edited_kernel("Duration", lambda _: 5e9), 0, "quarantined, not events"),
    Hostile(
        "kernel_5000_s_before_the_rest",
        edited_kernel("Start Time", lambda start: start - 5e9),
        0,
        "start more than 60 s away from the rest of the rank",
    ),
    Hostile("config_width_as_text", config_field("hidden_size", '"x"'), 3, "model config field hidden_size"),
    Hostile("config_width_past_a_float", config_field("vocab_size", "1e400"), 3, "model config field vocab_size"),
]


def run_measured(args: list[str], timeout: float = 300) -> tuple[int, str, str, int]:
    """(exit code, stdout, stderr, peak RSS in bytes) of the npuprof CLI on ``args``."""
    exe = shutil.which("npuprof") or str(Path(sys.executable).with_name("npuprof"))
    with open(os.devnull, "rb") as stdin:
        proc = subprocess.Popen([exe, *args], stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    # communicate() reaped it: its peak is the largest of this process's waited children so far, so
    # the measurement runs in a fresh interpreter per case (below) to make it the CLI's own
    return proc.returncode, out, err, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024


MEASURE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from badinputs.hostile import run_measured
print(json.dumps(run_measured(sys.argv[2:])))
"""
