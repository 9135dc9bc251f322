"""A step starts where the profiler started it (ProfilerStep#N): the time before its first kernel —
the data loader, the batch's copy to the device — is the step's, in its wall and on its ledger."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from conftest import PYTORCH_DATA
from helpers.ledger_checks import assert_ledger_adds_up

from npuprof.api import Analysis
from npuprof.pipeline import schema
from npuprof.pipeline.runner import analyze
from npuprof.synth import generate
from npuprof.synth.timeline import STEP_HEAD_US

CNN_TEXT = PYTORCH_DATA / "text" / "level2"
CNN_DB = PYTORCH_DATA / "db" / "level2"


def _outputs(root: Path, out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    analyze(root, out, jobs=2)
    return pd.read_csv(out / schema.STEP_SUMMARY.file).set_index("rank_id"), assert_ledger_adds_up(out)


def _covered_ms(spans: list[tuple[float, float]], start: float, end: float) -> float:
    """The ms of [start, end] (µs) that the union of ``spans`` covers."""
    clipped = sorted((max(s, start), min(e, end)) for s, e in spans if e > start and s < end)
    covered, reach = 0.0, start
    for s, e in clipped:
        covered += max(e - max(s, reach), 0.0)
        reach = max(reach, e)
    return covered / 1000.0


def test_the_real_cnn_step_starts_at_its_profiler_step_and_counts_the_data_loader(tmp_path):
    """Each rank's one step starts 17-18 ms before its first kernel (step_trace_time.csv's Preparing; the
    ProfilerStep#50 span of trace_view.json): the wall is Stage + Preparing, and the data loader's fetch
    inside that stretch is an idle line of its own, as long as trace_view's dataloader spans there."""
    steps, ledger = _outputs(CNN_TEXT, tmp_path / "out")
    for rank in (0, 1):
        output = CNN_TEXT / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
        vendor = pd.read_csv(output / "step_trace_time.csv").iloc[0]
        assert steps.loc[rank, "head_ms"] == pytest.approx(vendor["Preparing"] / 1000, abs=1e-6)
        assert steps.loc[rank, "wall_ms"] == pytest.approx((vendor["Stage"] + vendor["Preparing"]) / 1000, abs=1e-3)
        assert steps.loc[rank, "start_source"] == "step_trace_time.csv Preparing"
        events = json.loads((output / "trace_view.json").read_text())
        events = events["traceEvents"] if isinstance(events, dict) else events
        (profiler_step,) = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
        kernels = pd.read_csv(output / "kernel_details.csv")
        first_kernel = float(kernels["Start Time(us)"].min())
        assert steps.loc[rank, "start_us"] == pytest.approx(float(profiler_step["ts"]), abs=0.5)
        loader = [
            (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
            for e in events
            if e.get("ph") == "X" and "dataloader" in str(e.get("name", "")).lower()
        ]
        in_head = _covered_ms(loader, float(profiler_step["ts"]), first_kernel)
        assert in_head > 3.0  # the sample's fetch of the batch: 3.7 ms
        mine = ledger[ledger["rank_id"] == rank]
        assert mine.loc[mine["line"] == "idle dataloader", "ms"].sum() == pytest.approx(in_head, abs=0.01)


def test_the_db_export_starts_the_step_at_step_time(tmp_path):
    """The db export records the same start as STEP_TIME.startNs: the step's head runs from it to the
    first compute or communication task, and its host tables (PYTORCH_API) say the data loader ran
    there, as trace_view.json does for the text export."""
    steps, ledger = _outputs(CNN_DB, tmp_path / "out")
    for rank in (0, 1):
        (db,) = (CNN_DB / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT").glob("ascend_pytorch_profiler_*.db")
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
            (start_ns,) = con.execute("SELECT startNs FROM STEP_TIME").fetchone()
            (first_ns,) = con.execute(
                "SELECT MIN(s) FROM (SELECT MIN(t.startNs) AS s FROM COMPUTE_TASK_INFO c JOIN TASK t "
                "ON c.globalTaskId = t.globalTaskId UNION ALL SELECT MIN(startNs) FROM COMMUNICATION_OP)"
            ).fetchone()
            loader = con.execute(
                "SELECT CAST(p.startNs AS INTEGER), CAST(p.endNs AS INTEGER) FROM PYTORCH_API p JOIN STRING_IDS s "
                "ON s.id = p.name WHERE lower(s.value) LIKE '%dataloader%'"
            ).fetchall()
        assert steps.loc[rank, "start_source"] == "profiler db STEP_TIME"
        assert steps.loc[rank, "head_ms"] == pytest.approx((first_ns - start_ns) / 1e6, abs=1e-6)
        assert steps.loc[rank, "head_ms"] > 10.0
        in_head = _covered_ms([(s / 1000, e / 1000) for s, e in loader], start_ns / 1000, first_ns / 1000)
        mine = ledger[ledger["rank_id"] == rank]
        assert in_head > 3.0
        assert mine.loc[mine["line"] == "idle dataloader", "ms"].sum() == pytest.approx(in_head, abs=0.01)


@pytest.mark.parametrize("export", ["text", "db"])
def test_a_data_loader_late_at_the_top_of_the_step_is_inside_the_step(tmp_path, export):
    """slow_dataloader_rank: rank 1's loader hands over each batch 1.5 ms late, before its first kernel.
    Its steps' heads hold the stall (the others' only the host's own gap), in the text export's and the
    db's record alike; with the host trace (trace_view.json, or the db's PYTORCH_API) the ledger names it
    as the data loader's, and its peers' wait in their all-reduce is explained by the same finding."""
    root = Path(generate(tmp_path / "root", "slow_dataloader_rank", seed=2, export=export)["root"])
    steps, ledger = _outputs(root, tmp_path / "out")
    (stall,) = json.loads((root / "ground_truth.json").read_text())["faults"]
    (late,) = stall["ranks"]
    complete = steps[steps["complete"].astype(bool)]
    own_gap_ms = STEP_HEAD_US / 1000  # synth starts every step this long before its first kernel
    heads = complete.groupby(level=0)["head_ms"].mean()
    assert heads[late] == pytest.approx(own_gap_ms + stall["gap_us"] / 1000, abs=0.01)
    assert heads.drop(late).to_numpy() == pytest.approx(own_gap_ms, abs=0.01)
    # the db's framework spans (PYTORCH_API) name the loader as trace_view.json does
    findings = json.loads((tmp_path / "out" / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]
    (loader,) = [f for f in findings if f["finding_type"] == "dataloader_stall"]
    assert loader["rank_ids"] == [late]
    ledger = ledger[ledger["complete"].astype(bool)]
    steps_of_late = ledger[ledger["rank_id"] == late]["step_ordinal"].nunique()
    own = ledger[(ledger["rank_id"] == late) & (ledger["line"] == "idle dataloader")]
    assert own["ms"].sum() / steps_of_late == pytest.approx(stall["gap_us"] / 1000, rel=0.02)
    # what fixing the loader recovers there is its; the rest of the stall is still its cause, not recoverable
    assert set(own["explained_by"]) <= {loader["claim_id"], "cause:" + loader["claim_id"]}
    credited = own.loc[own["explained_by"] == loader["claim_id"], "ms"].sum() / steps_of_late
    assert credited == pytest.approx(loader["recoverable_ms_by_rank"][str(late)], rel=0.05)
    # the peers wait less by what the loader's fix saves them; no other finding takes their wait
    waits = ledger[(ledger["rank_id"] != late) & ledger["line"].str.match(r"communication .* (wait|idle)$")]
    taken = waits[~waits["explained_by"].isin(["unexplained"])]
    assert taken["ms"].sum() > 0 and set(taken["explained_by"]) == {loader["claim_id"]}
    # the late rank's compute is its step's own, not the symptom's (slow_rank_suspected names the loader)
    compute = ledger[(ledger["rank_id"] == late) & ledger["line"].str.startswith("compute ")]
    assert compute["explained_by"].str.startswith("expected:").all()


def test_without_a_recorded_start_the_step_starts_at_its_first_kernel(tmp_path):
    """An older export without Preparing (and no db): the step is its device span, said by a null source;
    a step_trace_time.csv that cannot be read is named in a note, and the analysis goes on."""
    root = Path(generate(tmp_path / "root", "clean", seed=1, ranks=2, steps=3)["root"])
    traces = sorted(root.rglob("step_trace_time.csv"))
    kept = pd.read_csv(traces[0])
    kept.drop(columns="Preparing").to_csv(traces[0], index=False)
    traces[1].write_bytes(b"Step,Computing\n\xff\xfe garbage\n")
    analyze(root, tmp_path / "out", jobs=2)
    steps = pd.read_csv(tmp_path / "out" / schema.STEP_SUMMARY.file)
    assert (steps["head_ms"] == 0).all() and steps["start_source"].isna().all()
    notes = Analysis(tmp_path / "out").manifest("segment")["rank_summaries"]
    worded = " ".join(n for m in notes for n in m["notes"])
    assert "step_trace_time.csv is unreadable" in worded and "start at their first kernel" in worded
