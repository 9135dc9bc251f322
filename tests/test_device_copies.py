"""The device's memory copies (MEMCPY_ASYNC) as a cause of idle time: a planted host-to-device copy on the
compute stream is the cause of its gap and of nothing else, with its size and direction; the copy takes
its part of a gap before the host's classes do; on the real captures both trace readers and the db find
the copies the raw files hold."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import SAMPLE_ROOTS

from npuprof.pipeline import schema
from npuprof.pipeline.sources.profiler_db import connect_readonly
from npuprof.pipeline.stages.evidence import host_trace, trace_copies
from npuprof.pipeline.stages.evidence.host_db import read_db_host_events
from npuprof.pipeline.stages.evidence.idle_causes import gap_causes
from npuprof.synth.host_side import COPY_GBPS

pytestmark = pytest.mark.xdist_group("planted")  # shares planted_outputs


def test_a_planted_copy_is_the_cause_of_its_gap_on_its_steps_only(planted_outputs):
    root, out = planted_outputs["host_stalls"]
    truth = json.loads((root / "ground_truth.json").read_text())
    fault = next(f for f in truth["faults"] if f["kind"] == "memcpy_in_step")
    planted = {(int(r), o) for r in truth["ranks"] for o in fault["step_ordinals"]}
    accounting = pd.read_csv(out / schema.STEP_TIME_ACCOUNTING_CSV.file)
    rows = accounting[(accounting["breakdown"] == "idle_by_cause") & (accounting["component"] == "copy")]
    assert set(zip(rows["rank_id"], rows["step_ordinal"])) == planted
    assert np.allclose(rows["ms"], fault["gap_us"] / 1000.0, rtol=0.01)
    copies = pd.read_parquet(out / schema.DEVICE_COPIES)
    assert set(zip(copies["rank_id"].astype(int), copies["step_ordinal"])) == planted
    assert np.allclose(copies["duration_us"], fault["gap_us"], rtol=0.01)  # the gap: the stall and the device's own
    assert np.allclose(copies["bytes"], copies["duration_us"] * 1000 * COPY_GBPS, rtol=1e-3)  # at the planted GB/s
    assert set(copies["direction"]) == {"host to device"}


def test_a_copy_takes_its_part_of_a_gap_before_the_host_does():
    """Two gaps of 100 µs: the first queued (its kernel launched before it began), the second the
    host's, blocked in a sync; a copy runs over the last 40 µs of each."""
    gaps = pd.DataFrame({"start_ns": [0, 200_000], "end_ns": [100_000, 300_000]})
    host = pd.DataFrame({"name": ["aten::item"], "process": ["Python"], "start_us": [190.0], "end_us": [300.0]})
    copies = pd.DataFrame({"start_us": [60.0, 260.0], "end_us": [100.0, 300.0]})
    masks = {"sync": np.array([True])}
    causes = gap_causes(gaps, np.array([-5.0, 299.0]), host, masks, copies)
    assert causes["copy_us"].tolist() == pytest.approx([40.0, 40.0])
    assert causes["queued_us"].tolist() == pytest.approx([60.0, 0.0])
    assert causes["sync_us"].tolist() == pytest.approx([0.0, 60.0])
    without = gap_causes(gaps, np.array([-5.0, 299.0]), host, masks)  # no copies: as before them
    assert without["copy_us"].tolist() == [0.0, 0.0] and without["sync_us"].tolist() == pytest.approx([0.0, 100.0])


def test_the_real_copies_are_read_alike_by_both_trace_readers_and_from_the_db():
    text, _ = SAMPLE_ROOTS["text_level2"]
    (trace,) = Path(text).glob("rank0*/ASCEND_PROFILER_OUTPUT/trace_view.json")
    events = json.loads(trace.read_text())
    hardware = {e["pid"] for e in events if e.get("ph") == "M" and e.get("args", {}).get("name") == "Ascend Hardware"}
    raw = [e for e in events if e.get("name") == "MEMCPY_ASYNC" and e.get("pid") in hardware and e.get("ph") == "X"]
    columnar = host_trace.read_host_events(trace, 0.0, 2e16, 500_000).copies
    kept = host_trace._Kept(0.0, 2e16, 500_000)
    with open(trace, "rb") as handle:
        host_trace._streamed(trace, handle, kept)
    pd.testing.assert_frame_equal(columnar, trace_copies.joined_copies(kept.copies, kept.copy_blocks))
    assert len(columnar) == len(raw) > 0
    assert columnar["bytes"].sum() == sum(e["args"]["data size(Byte)"] for e in raw)
    db_root, _ = SAMPLE_ROOTS["db_level2"]
    (db,) = Path(db_root).glob("rank0*/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_*.db")
    con = connect_readonly(db)
    count = con.execute(
        "SELECT COUNT(*) FROM TASK t JOIN STRING_IDS s ON s.id = t.taskType WHERE s.value = 'MEMCPY_ASYNC'"
    ).fetchone()[0]
    con.close()
    copies = read_db_host_events(db, 0.0, 9e15, 500_000).copies
    assert len(copies) == count > 0 and copies["bytes"].isna().all()
