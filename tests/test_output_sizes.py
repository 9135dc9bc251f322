"""Outputs sized to what people read: in fast mode the evidence views list each rank's longest idle
windows (every window stays in Parquet), every id a finding cites resolves in
report/cited_evidence.csv, and the Perfetto trace is written only when asked; full mode lists all."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from npuprof import knowledge
from npuprof.pipeline import schema
from npuprof.pipeline.options import AnalyzeOptions
from npuprof.pipeline.runner import StageRange, analyze
from npuprof.synth import generate

LISTED = 3  # windows per rank the views list here (the product lists 200: a synth root has fewer)


def _views(out: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Every idle window (Parquet), the windows bubble_windows.jsonl lists, evidence_index.csv."""
    windows = pd.read_parquet(out / schema.BUBBLE_WINDOWS.path)
    lines = (out / schema.BUBBLE_WINDOWS_JSONL).read_text().splitlines()
    listed = pd.DataFrame([json.loads(line) for line in lines])
    return windows, listed, pd.read_csv(out / schema.EVIDENCE_INDEX_CSV.file)


def test_fast_mode_lists_each_ranks_longest_windows_and_resolves_every_cited_id(tmp_path, monkeypatch):
    monkeypatch.setitem(knowledge.load("evidence_rules")["views"], "fast_windows_per_rank", LISTED)
    root = Path(generate(tmp_path / "root", "host_stalls", seed=3)["root"])
    out = tmp_path / "out"
    analyze(root, out, jobs=1)
    windows, listed, index = _views(out)
    assert windows.groupby("rank_id").size().min() > LISTED  # the planted root has more than are listed
    duration = windows["end_ns"] - windows["start_ns"]
    longest = windows.assign(duration=duration).sort_values("duration", ascending=False, kind="stable")
    expected = set(longest.groupby("rank_id").head(LISTED)["evidence_id"])
    assert set(listed["evidence_id"]) == expected and len(listed) == len(expected)
    in_index = index[index["kind"] == "bubble_window"]
    assert set(in_index["evidence_id"]) == expected
    every = pd.read_parquet(out / schema.EVIDENCE_INDEX.path)
    others = every[every["kind"] != "bubble_window"]
    assert len(index) - len(in_index) == len(others)  # steps, operators, collectives: all of them
    manifest = json.loads((out / schema.stage_manifest_name("evidence")).read_text())
    assert manifest["windows_listed_per_rank"] == LISTED

    findings = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]
    cited = pd.read_csv(out / schema.REPORT_CITED_EVIDENCE).set_index("evidence_id")
    ids = {e for f in findings for e in f["evidence_ids"]}
    assert ids and ids == set(cited.index)
    assert ids - set(index["evidence_id"]), "the test must cite a window the fast views do not list"
    for finding in findings:
        for evidence_id in finding["evidence_ids"]:
            assert finding["claim_id"] in cited.loc[evidence_id, "cited_by"].split(";")
    assert not (out / schema.REPORT_TRACE).exists()

    analyze(None, out, jobs=1, options=AnalyzeOptions(mode="full"), stage_range=StageRange(from_stage="evidence"))
    windows, listed, index = _views(out)
    assert len(listed) == len(windows) and (index["kind"] == "bubble_window").sum() == len(windows)
    assert (out / schema.REPORT_TRACE).exists()
