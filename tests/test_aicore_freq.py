"""AI Core frequency: read from real captures exactly as they store it, a planted throttled card is
found with the time it costs (checked against its unthrottled twin), and it is named as the cause
of the slow rank it makes. Also the detector plug-in mechanism the finding was added through."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest
from conftest import PYTORCH_DATA

from npuprof.pipeline import schema
from npuprof.pipeline.runner import analyze
from npuprof.pipeline.sources.aicore_freq import read_aicore_freq, read_db_freq, read_trace_freq
from npuprof.synth import SCENARIOS, generate

pytestmark = pytest.mark.xdist_group("planted")  # shares planted_outputs

RANK0 = "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"


def findings_of(out: Path) -> list[dict]:
    return json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]


@pytest.mark.parametrize("level", ["level0", "level1", "level2"])
def test_db_samples_are_the_table_rows(level):
    db = next((PYTORCH_DATA / "db" / level / RANK0).glob("ascend_pytorch_profiler_*.db"))
    with sqlite3.connect(db) as con:
        raw = sorted(con.execute("SELECT timestampNs, freq FROM AICORE_FREQ").fetchall())
    samples = read_db_freq(db)
    assert list(zip(samples["timestamp_ns"], samples["freq_mhz"])) == [(int(t), float(f)) for t, f in raw]


@pytest.mark.parametrize("level", ["level0", "level1", "level2"])
def test_trace_samples_are_the_counter_events(level):
    path = PYTORCH_DATA / "text" / level / RANK0 / "trace_view.json"
    events = json.loads(path.read_text())
    expected = sorted(
        (int(Decimal(str(e["ts"])) * 1000), float(e["args"]["MHz"]))
        for e in events
        if e.get("ph") == "C" and e.get("name") == "AI Core Freq"
    )
    samples, unreadable = read_trace_freq(path)
    assert unreadable == 0 and expected
    found = list(zip(samples["timestamp_ns"], samples["freq_mhz"]))
    assert expected == found  # exact ns: the µs text is read as a decimal, not a float


def test_a_damaged_trace_counts_what_it_could_not_read(tmp_path):
    good = '{"name": "AI Core Freq", "ts": "100.5", "pid": 1, "tid": 0, "args": {"MHz": 1500}, "ph": "C"}'
    text_mhz = '{"name": "AI Core Freq", "ts": "200", "pid": 1, "tid": 0, "args": {"MHz": "fast"}, "ph": "C"}'
    meta = '{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "AI Core Freq"}}'
    cut = '{"name": "AI Core Freq", "ts": "300", "pid": 1, "ti'
    path = tmp_path / "trace_view.json"
    path.write_text(f"[{meta}, {good}, {text_mhz}, {cut}")
    samples, unreadable = read_trace_freq(path)
    assert samples[["timestamp_ns", "freq_mhz"]].values.tolist() == [[100_500, 1500.0]]
    assert unreadable == 2  # the text MHz and the cut event; the process-name metadata is not a sample
    _, source, unreadable_files = read_aicore_freq(None, str(path))
    assert source == str(path)
    assert [(p, why) for p, why, _ in unreadable_files] == [
        (str(path), "2 AI Core Freq counter events could not be read")
    ]
    (tmp_path / "empty.json").write_bytes(b"")
    assert read_aicore_freq(None, str(tmp_path / "empty.json"))[0].empty


def test_normalize_keeps_the_samples_with_their_source(planted_outputs):
    root, out = planted_outputs["throttled_card"]
    samples = pd.read_parquet(out / schema.AICORE_FREQ)
    fault = json.loads((root / "ground_truth.json").read_text())["faults"][0]
    rank = samples[samples["rank_id"].astype(int) == fault["ranks"][0]]
    assert sorted(rank["freq_mhz"].unique()) == [1200.0, 1800.0]
    assert (rank["freq_mhz"] == 1200.0).sum() == len(fault["step_ids"])
    index = json.loads((out / schema.SOURCE_INDEX).read_text())
    assert set(samples["source_id"]) <= {s["source_id"] for s in index["sources"]}


def test_the_throttled_card_costs_what_its_twin_says(planted_outputs, tmp_path):
    """The predicted recoverable time is the step-wall difference to the same capture unthrottled."""
    root, out = planted_outputs["throttled_card"]
    (throttled,) = [f for f in findings_of(out) if f["finding_type"] == "aicore_freq_throttled"]
    twin = replace(SCENARIOS["throttled_card"], name="throttled_twin", faults=())
    twin_root = Path(
        generate(tmp_path / "twin", twin, seed=json.loads((root / "ground_truth.json").read_text())["seed"])["root"]
    )
    analyze(twin_root, tmp_path / "twin_out", jobs=2)
    walls = [pd.read_csv(o / schema.STEP_SUMMARY.file)["wall_ms"].mean() for o in (out, tmp_path / "twin_out")]
    measured = walls[0] - walls[1]
    assert measured > 1.0
    assert throttled["recoverable_ms_per_step"] == pytest.approx(measured, rel=0.15)
    assert throttled["metrics"]["freq_mhz"] == pytest.approx(1200.0)
    assert throttled["metrics"]["nominal_mhz"] == pytest.approx(1800.0)
    assert throttled["metrics"]["step_count"] == 3 and throttled["statistic"]["value"] == pytest.approx(2 / 3)


def test_the_slow_rank_names_the_clock_as_its_cause(planted_outputs):
    _, out = planted_outputs["throttled_card"]
    findings = findings_of(out)
    (throttled,) = [f for f in findings if f["finding_type"] == "aicore_freq_throttled"]
    (slow,) = [f for f in findings if f["finding_type"] == "slow_rank_suspected"]
    assert slow["rank_ids"] == throttled["rank_ids"] == [1]
    assert [c["claim_id"] for c in slow["likely_causes"]] == [throttled["claim_id"]]
    assert "1200 MHz" in slow["summary"]
    # a slow rank with nothing behind it names no cause
    _, plain = planted_outputs["slow_rank"]
    assert all(not f["likely_causes"] for f in findings_of(plain))


def test_throttled_kernels_keep_their_cycles(planted_outputs):
    """The synthetic physics: the throttled card's kernels take 1.5x as long for the same cycles."""
    root, _ = planted_outputs["throttled_card"]
    kernels = {
        rank: pd.read_csv(next(root.glob(f"*_100{rank}_*/ASCEND_PROFILER_OUTPUT/kernel_details.csv")))
        for rank in (0, 1)
    }
    compute = {r: k[k["aic_total_cycles"] > 0] for r, k in kernels.items()}
    late = {r: c[c["Step Id"] == c["Step Id"].max()] for r, c in compute.items()}
    ratio = late[1]["Duration(us)"].median() / late[0]["Duration(us)"].median()
    cycles = late[1]["aic_total_cycles"].median() / late[0]["aic_total_cycles"].median()
    assert ratio == pytest.approx(1.5, rel=0.05) and cycles == pytest.approx(1.0, rel=0.05)


# --- the plug-in mechanism -----------------------------------------------------------------------
