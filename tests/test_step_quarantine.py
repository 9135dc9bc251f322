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

# one worker runs the module: its module fixture is built once (xdist would build it again on each
# worker a test of it lands on, and again whenever modules interleave there)
pytestmark = pytest.mark.xdist_group("step_quarantine")

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


def test_an_early_timestamp_is_left_out_and_neither_splits_the_root_nor_stretches_the_capture(twin, tmp_path):
    """One kernel 5,000 s before the rest of its rank: before, rank 0 "started 83 minutes before rank 1"
    and the whole root was refused as two captures. It is a corrupt row like a late one: left out of every
    step and named, the steps are the twin's, and the capture's span is the twin's too."""
    planted: dict = {}

    def plant(frame: pd.DataFrame, start: str) -> None:
        early = frame.index[frame["Step Id"] == sorted(frame["Step Id"].unique(), key=int)[3]][25]
        frame.loc[early, start] = f"{float(frame.loc[early, start]) - LATE_US:.3f}"
        planted["row"] = int(early)

    out = tmp_path / "out"
    result, steps = _analyzed(_edit(twin, tmp_path, plant), out)
    _, expected = _analyzed(twin, tmp_path / "twin_out")
    columns = ["rank_id", "step_id", "wall_ms"]
    pd.testing.assert_frame_equal(steps[columns], expected[columns], rtol=0.02)
    warnings = " | ".join(result.get("warnings", []))
    assert f"(row {planted['row']}) start more than 60 s away from the rest of the rank" in warnings, warnings
    capture = json.loads((out / "report" / "analysis_summary.json").read_text())["identity"]["capture"]
    twin_capture = json.loads((tmp_path / "twin_out" / "report" / "analysis_summary.json").read_text())
    assert capture["wall_ms"] == pytest.approx(twin_capture["identity"]["capture"]["wall_ms"], rel=0.001)


def test_a_whole_step_after_a_long_pause_is_kept(twin, tmp_path):
    def pause(frame: pd.DataFrame, start: str) -> None:
        last = frame["Step Id"] == sorted(frame["Step Id"].unique(), key=int)[-1]
        frame.loc[last, start] = (frame.loc[last, start].astype(float) + 120e6).map("{:.3f}".format)

    result, steps = _analyzed(_edit(twin, tmp_path, pause), tmp_path / "out")
    assert not [w for w in result.get("warnings", []) if "left out of every step" in w]
    assert steps.groupby("rank_id").size().to_dict() == {0: 6, 1: 6}
    assert json.dumps(result).count("ran inside step") == 0


def test_a_task_lasting_past_the_capture_is_quarantined_and_the_steps_equal_the_twin(twin, tmp_path):
    """One kernel whose Duration reads 5e9 µs (83 minutes, in a capture of milliseconds) made its step
    "100 % compute" and passed as ok: it is left out of the events, named with its line in a warning,
    and the steps are the twin's."""
    planted: dict = {}

    def plant(frame: pd.DataFrame, start: str) -> None:
        duration = next(c for c in frame.columns if c.startswith("Duration"))
        last = frame.index[frame["Step Id"] == sorted(frame["Step Id"].unique(), key=int)[-1]][-5]
        frame.loc[last, duration] = f"{LATE_US:.3f}"
        planted["line"] = int(last) + 2

    result, steps = _analyzed(_edit(twin, tmp_path, plant), tmp_path / "out")
    _, expected = _analyzed(twin, tmp_path / "twin_out")
    columns = ["rank_id", "step_id", "wall_ms"]
    pd.testing.assert_frame_equal(steps[columns], expected[columns], rtol=0.02)
    warnings = " | ".join(result.get("warnings", []))
    assert "quarantined, not events" in warnings and f"line {planted['line']} (5,000 s)" in warnings, warnings
    assert result["normalize"]["long_tasks_quarantined"] == 1


def test_many_tasks_lasting_past_the_capture_refuse_the_rank(twin, tmp_path):
    """Past a few (1 % of the rank's rows) such tasks are no stray corruption: the export is not trusted,
    and the rank is refused naming the first line, rather than analyzed into a wrong answer."""

    def plant(frame: pd.DataFrame, start: str) -> None:
        duration = next(c for c in frame.columns if c.startswith("Duration"))
        frame.loc[frame.index[10:40], duration] = f"{LATE_US:.3f}"

    root = _edit(twin, tmp_path, plant)
    run = run_cli("analyze", str(root), "-o", str(tmp_path / "out"), "--progress", "none")
    assert run.returncode == 3 and "Traceback" not in run.stderr, run.stderr
    assert "30 tasks last longer than 60 s" in run.result["error"] and run.result["line"] == 12


def test_a_fifth_of_a_step_shifted_far_away_is_left_out_and_makes_no_phantom_step(twin, tmp_path):
    """A fifth of one step's rows shifted by 5,000 s: too many to be a stray row, and before they made a
    second, phantom copy of the step (and the step itself passed as complete without them). A step does
    not straddle a gap of hours: those rows are left out, the step is no complete step, and every other
    step equals the twin's."""
    planted: dict = {}

    def plant(frame: pd.DataFrame, start: str) -> None:
        step = sorted(frame["Step Id"].unique(), key=int)[2]
        rows = frame.index[frame["Step Id"] == step]
        shifted = rows[-len(rows) // 5 :]
        frame.loc[shifted, start] = (frame.loc[shifted, start].astype(float) + LATE_US).map("{:.3f}".format)
        planted.update(step=int(step), rows=len(shifted))

    result, steps = _analyzed(_edit(twin, tmp_path, plant), tmp_path / "out")
    _, expected = _analyzed(twin, tmp_path / "twin_out")
    assert steps.groupby("rank_id").size().to_dict() == {0: 6, 1: 6}  # no phantom step
    damaged = (steps["rank_id"] == 0) & (steps["step_id"] == planted["step"])
    assert not steps.loc[damaged, "complete"].any() and steps.loc[damaged, "tags"].eq("ROWS_LEFT_OUT").all()
    columns = ["rank_id", "step_id", "wall_ms"]
    pd.testing.assert_frame_equal(
        steps.loc[~damaged, columns].reset_index(drop=True),
        expected.loc[~damaged.to_numpy(), columns].reset_index(drop=True),
        rtol=0.02,
    )
    warnings = " | ".join(result.get("warnings", []))
    assert f"{planted['rows']} rows of step {planted['step']}" in warnings and "not counted as complete" in warnings
