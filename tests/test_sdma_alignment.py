"""sdma_misaligned: a collective's SDMA slice that is not 512-byte aligned is measured against its aligned
siblings (the same op's other slices on the same rank and link) and priced by what the op's busiest plane
gives up; HCCL's data moves are read alike from trace_view.json by both readers and from the db."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import SAMPLE_ROOTS
from helpers.planted import planted_finding

from npuprof import knowledge
from npuprof.pipeline import schema
from npuprof.pipeline.stages.diagnostics.detectors.sdma_alignment import (
    FINDING,
    instance_savings,
    sdma_moves,
    with_aligned_rates,
)
from npuprof.pipeline.stages.evidence import host_trace, trace_hccl
from npuprof.pipeline.stages.evidence.host_db import read_db_host_events

pytestmark = pytest.mark.xdist_group("planted")  # shares planted_outputs

RULES = knowledge.load("diagnosis_rules")["findings"][FINDING]
SLICE = 1 << 20  # an aligned slice, bytes


def _moves(rows: list[tuple]) -> pd.DataFrame:
    """Data moves of (instance, plane, bytes, µs[, link]) on rank 0, placed in their instances."""
    frame = pd.DataFrame(
        [(r[0], r[1], r[2], r[3], r[4] if len(r) > 4 else "HCCS") for r in rows],
        columns=["alignment_id", "plane", "bytes", "duration_us", "link_type"],
    )
    return sdma_moves(frame.assign(rank_id=0, task_type="Memcpy", transport="SDMA"), RULES)


def test_a_misaligned_slice_is_measured_against_its_own_op_s_aligned_slices():
    off = SLICE - 256
    moves = _moves(
        [
            ("c0", 1, SLICE, 100.0),
            ("c0", 2, SLICE, 100.0),
            ("c0", 3, off, 200.0),  # half its siblings' rate
            ("c1", 1, SLICE, 10.0),  # another op, ten times as fast: not c0's yardstick
            ("c1", 2, SLICE, 10.0),
            ("c1", 3, SLICE, 10.0),
        ]
    )
    (slow,) = with_aligned_rates(moves, RULES).itertuples(index=False)
    assert slow.alignment_id == "c0" and slow.aligned_rate == pytest.approx(SLICE / 100.0)
    assert slow.rate / slow.aligned_rate == pytest.approx(0.5, rel=0.01)
    # one aligned sibling is not enough to measure against, and a sibling 4x its size is no sibling
    assert with_aligned_rates(_moves([("c0", 1, SLICE, 100.0), ("c0", 3, off, 200.0)]), RULES).empty
    lone = _moves([("c0", 1, 4 * SLICE, 100.0), ("c0", 2, 4 * SLICE, 100.0), ("c0", 3, off, 200.0)])
    assert with_aligned_rates(lone, RULES).empty


def test_moves_inside_the_chip_or_of_a_few_bytes_are_not_read():
    moves = _moves([("c0", 1, 300, 1.0), ("c0", 2, SLICE - 256, 100.0, "ON_CHIP"), ("c0", 3, SLICE, 100.0)])
    assert moves["bytes"].tolist() == [SLICE] and not moves["misaligned"].any()


def test_an_op_gives_up_what_its_busiest_plane_does():
    """A slow slice of 300 µs (100 at its siblings' rate) saves 200 µs, unless another plane is busy
    longer than what is left: then only down to that plane."""
    slow = pd.DataFrame({"alignment_id": ["c0"], "rank_id": [0], "plane": [3], "saving_us": [200.0]})
    planes = pd.DataFrame({"alignment_id": "c0", "rank_id": 0, "plane": [1, 2, 3], "duration_us": [100.0, 100, 300]})
    assert instance_savings(planes, slow)["c0"] == pytest.approx(200.0)
    busy = planes.assign(duration_us=[100.0, 250.0, 300.0])  # plane 2 moves two slices back to back
    assert instance_savings(busy, slow)["c0"] == pytest.approx(50.0)


def test_the_planted_misaligned_bucket_is_found_priced_and_named_the_slow_collective_s_cause(planted_outputs):
    planted = planted_finding(planted_outputs, "misaligned_bucket", FINDING)
    out, truth, fault, findings, finding = planted.out, planted.truth, planted.fault, planted.findings, planted.finding
    assert finding["rank_ids"] == sorted(int(r) for r in truth["ranks"])
    assert (finding["metrics"]["role"], finding["metrics"]["kind"]) == ("DP", "allreduce")
    assert finding["statistic"]["value"] == pytest.approx(1 / fault["factor"], rel=0.05)
    assert finding["metrics"]["offsets"] == "256 B" and finding["metrics"]["ops_per_step"] == 1
    # the cited ops are each step's last DP all-reduce: the bucket after the backward
    alignment = pd.read_parquet(out / schema.COLLECTIVE_ALIGNMENT.path)
    dp = alignment[(alignment["parallel_role"] == "DP") & (alignment["kind"] == "allreduce")]
    last = dp.sort_values("start_us").groupby(["rank_id", "step_id"], observed=True).tail(1)
    assert set(finding["evidence_ids"]) <= set(last["evidence_id"])
    ledger = pd.read_csv(out / schema.STEP_LEDGER_CSV.file)
    # credited where its replay shortens the step: the bucket's transfer, and the waits of the members that
    # then wait less for the slowest one
    lines = set(ledger.loc[ledger["finding_type"] == FINDING, "line"])
    assert "communication DP allreduce transfer" in lines
    assert lines <= {f"communication DP allreduce {part}" for part in ("transfer", "wait", "idle")}
    slow = [f for f in findings if f["finding_type"] == "communication_collective_slow"]
    assert all(FINDING in [c["finding_type"] for c in f["likely_causes"]] for f in slow)


@pytest.mark.parametrize("name", ["clean", "contended_buckets", "exposed_grad_allreduce", "clean_inference"])
def test_ops_whose_slices_are_all_aligned_are_silent(planted_outputs, name):
    _, out = planted_outputs[name]
    tasks = pd.read_parquet(out / schema.HCCL_TASKS.path)
    assert len(tasks) and (tasks["bytes"] % RULES["alignment_bytes"] == 0).any()  # the planes were read
    findings = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]
    assert not [f for f in findings if f["finding_type"] == FINDING]


def test_the_real_data_moves_are_read_alike_by_both_trace_readers_and_from_the_db():
    text, _ = SAMPLE_ROOTS["text_level2"]
    (trace,) = Path(text).glob("rank0*/ASCEND_PROFILER_OUTPUT/trace_view.json")
    events = json.loads(trace.read_text())
    raw = [e for e in events if e.get("ph") == "X" and e.get("args", {}).get("size(Byte)", 0) > 0]
    columnar = host_trace.read_host_events(trace, 0.0, 2e16, 500_000).hccl_tasks
    kept = host_trace._Kept(0.0, 2e16, 500_000)
    with open(trace, "rb") as handle:
        host_trace._streamed(trace, handle, kept)
    pd.testing.assert_frame_equal(columnar, trace_hccl.joined_hccl_tasks(kept.hccl_tasks, kept.hccl_task_blocks))
    assert len(columnar) == len(raw) == 72
    in_order = sorted(raw, key=lambda e: (float(e["ts"]), e["tid"]))  # the reader's: start, then plane
    assert columnar["duration_us"].tolist() == [float(e["dur"]) for e in in_order]  # as written
    db_root, _ = SAMPLE_ROOTS["db_level2"]
    (db,) = Path(db_root).glob("rank0*/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_*.db")
    from_db = read_db_host_events(db, 0.0, 9e15, 500_000).hccl_tasks
    # the db holds another run of the same script: the same moves, at other times
    moved = ["task_type", "plane", "transport", "link_type", "bytes"]
    assert from_db[moved].value_counts().sort_index().equals(columnar[moved].value_counts().sort_index())
