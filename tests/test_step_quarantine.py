"""Rows whose step id or timestamp contradicts the capture: counted where they ran, or left out of every
step, with a warning naming them — measured against the twin without them. A whole step after a long
pause (a checkpoint save) is not touched."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_cli

from npuprof.synth import generate

LATE_US = 5e9  # 5,000 s: one kernel's timestamp gone wrong


@pytest.fixture(scope="module")
def twin(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("twin") / "root"
    generate(root, "clean", ranks=2, steps=6, layers=4, seed=3, trace=False)
    return root


def _rank0_kernels(root: Path) -> Path:
    return next(root.glob("*_1000_*/ASCEND_PROFILER_OUTPUT/kernel_details.csv"))


def _edit(twin: Path, tmp: Path, change) -> Path:
    root = tmp / "edited"
    shutil.copytree(twin, root)
    path = _rank0_kernels(root)
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    change(frame, next(c for c in frame.columns if c.startswith("Start Time")))
    frame.to_csv(path, index=False)
    return root


def _analyzed(root: Path, out: Path) -> tuple[dict, pd.DataFrame]:
    run = run_cli("analyze", str(root), "-o", str(out), "--progress", "none")
    assert run.returncode == 0, run.stderr
    return run.result, pd.read_csv(out / "step_summary.csv")


def test_a_late_timestamp_and_a_relabelled_row_are_quarantined_and_the_steps_equal_the_twin(twin, tmp_path):
    planted: dict = {}

    def plant(frame: pd.DataFrame, start: str) -> None:
        steps = sorted(frame["Step Id"].unique(), key=int)
        late = frame.index[frame["Step Id"] == steps[2]][40]
        frame.loc[late, start] = f"{float(frame.loc[late, start]) + LATE_US:.3f}"
        moved = frame.index[frame["Step Id"] == steps[4]][10]
        frame.loc[moved, "Step Id"] = steps[1]
        planted.update(late=int(late), moved=int(moved), inside=steps[4], label=steps[1])

    result, steps = _analyzed(_edit(twin, tmp_path, plant), tmp_path / "out")
    _, expected = _analyzed(twin, tmp_path / "twin_out")
    columns = ["rank_id", "step_id", "wall_ms"]
    assert len(steps) == len(expected) and steps["step_id"].is_unique is False  # two ranks, each step once
    pd.testing.assert_frame_equal(steps[columns], expected[columns], rtol=0.02)
    warnings = " | ".join(result.get("warnings", []))
    assert f"row {planted['moved']} labelled step {planted['label']} ran inside step {planted['inside']}" in warnings
    assert f"(row {planted['late']}) start more than 60 s away from the rest of the rank" in warnings


def test_a_whole_step_after_a_long_pause_is_kept(twin, tmp_path):
    def pause(frame: pd.DataFrame, start: str) -> None:
        last = frame["Step Id"] == sorted(frame["Step Id"].unique(), key=int)[-1]
        frame.loc[last, start] = (frame.loc[last, start].astype(float) + 120e6).map("{:.3f}".format)

    result, steps = _analyzed(_edit(twin, tmp_path, pause), tmp_path / "out")
    assert not [w for w in result.get("warnings", []) if "left out of every step" in w]
    assert steps.groupby("rank_id").size().to_dict() == {0: 6, 1: 6}
    assert json.dumps(result).count("ran inside step") == 0
