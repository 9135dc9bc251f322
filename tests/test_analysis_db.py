"""analysis.db: a db root's communication split (transit / wait / idle, per transport, per link) comes
from the export's own CommAnalyzer tables, as a text root's comes from communication.json."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from conftest import PYTORCH_DATA

from npuprof.pipeline import schema
from npuprof.pipeline.errors import BadInput
from npuprof.pipeline.runner import analyze
from npuprof.pipeline.sources.analysis_db import read_analysis_links, read_analysis_ops
from npuprof.pipeline.sources.communication_files import read_communication_json, read_communication_matrix
from npuprof.synth import generate

CNN_DB = PYTORCH_DATA / "db" / "level2"


def _sorted(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return frame.sort_values(keys).reset_index(drop=True)


def test_the_tables_read_as_the_json_files_of_the_same_capture(tmp_path):
    """synth writes one capture's communication records as JSON (text export) and as analysis.db (db
    export): both readers give the same ops and links, transport columns and packet sizes included."""
    text = Path(generate(tmp_path / "text", "slow_link", seed=4, steps=3)["root"])
    db = Path(generate(tmp_path / "db", "slow_link", seed=4, steps=3, export="db")["root"])
    for rank_dir in sorted(text.glob("rank*/ASCEND_PROFILER_OUTPUT")):
        twin = db / rank_dir.relative_to(text)
        (analysis,) = twin.glob("analysis.db")
        op_keys = ["step_id", "op_scope", "op_name"]
        from_json = _sorted(read_communication_json(rank_dir / "communication.json"), op_keys)
        from_db = _sorted(read_analysis_ops(analysis), op_keys)
        assert len(from_db) and list(from_db.columns) == list(from_json.columns)
        pd.testing.assert_frame_equal(from_db, from_json, check_dtype=False, rtol=1e-9)
        link_keys = ["step_id", "op_scope", "op_kind", "tier", "group_hash", "src_local_rank", "dst_local_rank"]
        links_json = _sorted(read_communication_matrix(rank_dir / "communication_matrix.json"), link_keys)
        links_db = _sorted(read_analysis_links(analysis), link_keys)
        pd.testing.assert_frame_equal(links_db, links_json, check_dtype=False, rtol=1e-9)


def test_the_real_db_capture_splits_its_wait_bound_allreduce(tmp_path):
    """The db export of the CNN: its first all-reduce waits 80 ms of which 0.24 ms is transit, as the
    rank's CommAnalyzerTime says; the step ledger splits it, and capture_incomplete_group names the
    group's six members the capture does not hold."""
    out = tmp_path / "out"
    analyze(CNN_DB, out, jobs=2)
    ops = pd.read_csv(out / schema.COMMUNICATION_SUMMARY_CSV.file)
    for rank in (0, 1):
        analysis = CNN_DB / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "analysis.db"
        with sqlite3.connect(f"file:{analysis}?mode=ro", uri=True) as con:
            raw = pd.read_sql_query("SELECT hccl_op_name, transit_time, idle_time FROM CommAnalyzerTime", con)
        mine = ops[ops["rank_id"] == rank].set_index("op_name")
        assert set(mine["source"]) == {"analysis_db"}
        for _, row in raw.iterrows():
            assert mine.loc[row["hccl_op_name"], "transit_ms"] == pytest.approx(row["transit_time"])
            assert mine.loc[row["hccl_op_name"], "idle_ms"] == pytest.approx(row["idle_time"])
    ledger = pd.read_csv(out / schema.STEP_LEDGER_CSV.file)
    assert not ledger["line"].str.endswith(" unsplit").any()
    findings = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]
    (group,) = [f for f in findings if f["finding_type"] == "capture_incomplete_group"]
    assert group["rank_ids"] == [0, 1] and "6 of the 8 members" in group["summary"]


def test_a_broken_analysis_db_is_named_and_the_events_stand_in(tmp_path):
    """Garbage in CommAnalyzerTime: one line naming the table and column; the analysis goes on with the
    ops from the device events (no split), and says so."""
    root = Path(generate(tmp_path / "db", "clean", seed=1, ranks=2, steps=3, export="db")["root"])
    analysis = next(root.rglob("analysis.db"))
    with sqlite3.connect(analysis) as con:
        con.execute("UPDATE CommAnalyzerTime SET idle_time = 'lots' WHERE rowid = 1")
    with pytest.raises(BadInput, match=r"CommAnalyzerTime\.idle_time: not a number: 'lots'"):
        read_analysis_ops(analysis)
    analyze(root, tmp_path / "out", jobs=2)
    manifest = json.loads((tmp_path / "out" / schema.stage_manifest_name("summarize")).read_text())
    assert any("analysis.db is unreadable" in line for line in manifest["limitations"])
    ops = pd.read_csv(tmp_path / "out" / schema.COMMUNICATION_SUMMARY_CSV.file)
    assert set(ops.groupby("rank_id")["source"].first()) == {"events", "analysis_db"}


def _priced(out: Path) -> dict[str, float]:
    findings = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]
    return {f["finding_type"]: f["recoverable_ms_per_step"] for f in findings}


@pytest.mark.parametrize("name", ["host_stalls", "host_bubble"])
def test_host_stalls_are_named_from_the_db_as_from_the_trace(tmp_path, name):
    """The profiler db's framework spans (PYTORCH_API) and CANN calls name a planted host stall as
    trace_view.json does, priced alike; a garbage collection is the Python GC process's, which the db
    does not record (it stays unnamed there)."""
    found = {}
    for export in ("text", "db"):
        root = Path(generate(tmp_path / export, name, seed=2, export=export)["root"])
        analyze(root, tmp_path / f"{export}_out", jobs=2)
        found[export] = _priced(tmp_path / f"{export}_out")
    planted = {f["type"] for f in json.loads((root / "ground_truth.json").read_text())["expected_findings"]}
    told = planted - {"device_idle_bubble"}  # merged into the blocking sync that caused it
    assert told <= set(found["text"])
    assert told - {"gc_pause"} <= set(found["db"]) and "gc_pause" not in found["db"]
    for finding in told - {"gc_pause"}:
        assert found["db"][finding] == pytest.approx(found["text"][finding], rel=0.02)
