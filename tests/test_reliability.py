"""Concurrent and changing inputs: one run per output dir, and a source that changes is refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import PYTORCH_DATA, copy_sample, run_cli

from npuprof.pipeline import schema
from npuprof.pipeline.errors import BadInput, StageFailed
from npuprof.pipeline.execution import map_rank_chains
from npuprof.pipeline.options import AnalyzeOptions
from npuprof.pipeline.progress import no_progress
from npuprof.pipeline.sources.discovery import discover
from npuprof.synth import generate


def test_a_second_run_into_the_same_output_dir_is_refused_while_the_first_writes(tmp_path):
    # a few seconds to analyze: the lock is seen (and the run frozen) long before the run could end
    root = generate(tmp_path / "root", "clean", steps=40, layers=12, seed=2, trace=False)["root"]
    out = tmp_path / "out"
    first = subprocess.Popen(
        ["npuprof", "analyze", root, "-o", str(out), "--progress", "none", "--jobs", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lock = out / schema.RUN_LOCK
    deadline = time.monotonic() + 60
    while not (lock.exists() and lock.read_text().startswith("pid")):
        assert time.monotonic() < deadline and first.poll() is None, "the first run never took the lock"
        time.sleep(0.02)
    # the first run frozen while it holds the lock: the second certainly comes while it writes
    os.kill(first.pid, signal.SIGSTOP)
    try:
        second = run_cli("analyze", root, "-o", str(out), "--overwrite", "--progress", "none")
    finally:
        os.kill(first.pid, signal.SIGCONT)
    stdout, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr
    assert second.returncode == 2 and "being written by another npuprof run" in second.result["error"]
    assert f"pid {first.pid}" in second.result["error"]
    assert json.loads(stdout)["status"] == "ok"
    again = run_cli("analyze", root, "-o", str(out), "--overwrite", "--progress", "none", "--to-stage", "normalize")
    assert again.returncode == 0, again.stderr  # the lock went with the first run's process
    assert not lock.exists()  # removed when the run ended: a finished output holds no lock file


def test_a_run_that_failed_at_once_leaves_a_dir_the_corrected_rerun_reuses(tmp_path):
    root = generate(tmp_path / "root", "clean", steps=3, seed=2, trace=False)["root"]
    out = tmp_path / "out"
    typo = run_cli("analyze", str(tmp_path / "roto"), "-o", str(out), "--progress", "none")
    assert typo.returncode == 2 and not out.exists()  # a usage error, refused before the dir was made
    (tmp_path / "empty").mkdir()  # a root that exists but holds no capture fails at discovery
    wrong = run_cli("analyze", str(tmp_path / "empty"), "-o", str(out), "--progress", "none")
    assert wrong.returncode == 3 and sorted(p.name for p in out.iterdir()) == [schema.FAILURE_JSON]
    fixed = run_cli("analyze", root, "-o", str(out), "--progress", "none")  # no --overwrite needed
    assert fixed.returncode == 0, fixed.stderr
    assert not (out / schema.FAILURE_JSON).exists() and not (out / schema.RUN_LOCK).exists()
    # a dir with real outputs in it is still refused without --overwrite
    again = run_cli("analyze", root, "-o", str(out), "--progress", "none")
    assert again.returncode == 2 and "not empty" in again.result["error"]


def test_a_kernel_source_that_changed_since_discovery_fails_its_rank(tmp_path):
    root = copy_sample(PYTORCH_DATA / "text" / "level0", tmp_path / "root")
    inputs = discover(root)
    kernels = root / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    with open(kernels, "a", encoding="utf-8") as handle:  # the capture is still being written
        handle.write("50,late_kernel,N/A,N/A,1736405443999999.000\t,1.0,0,0\n")
    with pytest.raises(StageFailed) as raised:
        map_rank_chains(tmp_path / "out", inputs, AnalyzeOptions(), ["normalize"], 1, no_progress)
    assert raised.value.phase == "normalize (rank 0)" and isinstance(raised.value.cause, BadInput)
    assert "changed while npuprof read it" in raised.value.one_line() and str(kernels) in raised.value.one_line()


def test_an_unchanged_source_records_the_state_it_was_read_in(tmp_path):
    root = copy_sample(PYTORCH_DATA / "text" / "level0", tmp_path / "root")
    inputs = discover(root)
    kernels = str(root / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
    rank0 = next(r for r in inputs.ranks if r.rank_id == 0)
    assert rank0.source_states[kernels] == [Path(kernels).stat().st_size, Path(kernels).stat().st_mtime_ns]


@pytest.mark.parametrize("vanishing", ["kernel_details.csv", "trace_view.json"])
def test_a_file_that_vanished_since_discovery_is_named_not_an_internal_error(tmp_path, vanishing):
    """A file found at discovery and gone when a stage opens it (moved, deleted, its rank dir swapped):
    the input changed under the run. The kernels fail their rank as bad input, naming the file; the
    host trace, an auxiliary input, degrades the root as an unreadable one does. Never a traceback."""
    root = Path(generate(tmp_path / "root", "clean", ranks=2, steps=3, layers=2, trace=True)["root"])
    inputs = discover(root)
    gone = next(root.rglob(vanishing))
    gone.unlink()
    stages = ["normalize", "segment", "classify", "summarize", "evidence"]
    if vanishing == "kernel_details.csv":
        with pytest.raises(StageFailed) as raised:
            map_rank_chains(tmp_path / "out", inputs, AnalyzeOptions(), stages, 1, no_progress)
        assert isinstance(raised.value.cause, BadInput), raised.value.one_line()
        assert f"{gone}: the file disappeared while npuprof read it" in raised.value.one_line()
    else:
        results = map_rank_chains(tmp_path / "out", inputs, AnalyzeOptions(), stages, 1, no_progress)
        assert json.dumps(results).count(str(gone)) >= 1  # named among the unreadable inputs
