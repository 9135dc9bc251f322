"""report: analysis_summary.json, report.md, trace.json and report.xlsx say what the analysis found,
cite resolvable evidence, and stay inert whatever the kernel names hold."""

from __future__ import annotations

import collections
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.hostile_names import HOSTILE, plant_hostile_names
from openpyxl import load_workbook

from npuprof import knowledge
from npuprof.pipeline import schema
from npuprof.pipeline.options import AnalyzeOptions
from npuprof.pipeline.runner import StageRange, analyze
from npuprof.pipeline.stages.report import stage as report_stage
from npuprof.pipeline.stages.report.html import longest_windows
from npuprof.pipeline.stages.report.inputs import ReportInputs
from npuprof.pipeline.stages.report.stage import _status
from npuprof.synth import SCENARIOS, generate

pytestmark = pytest.mark.xdist_group("planted")  # one worker: shares its fixtures

SECTIONS = (
    "Biggest Costs Of The Step",
    "Executive Summary",
    "Capture And Segmentation",
    "Macro Step Timeline",
    "Pipeline Coverage And Bound Families",
    "Profile-Derived Model Fingerprint",
    "Hardware Peak And MFU Context",
    "Step Class View",
    "Layer And Block View",
    "Operator View",
    "Operator Calculation And Roofline Estimates",
    "Step Inventory",
    "Cross-Rank And Anomaly Findings",
    "Finding Inventory",
    "Evidence Chain",
    "Limitations",
    "Glossary",
)


def summary_of(out: Path) -> dict:
    return json.loads((out / schema.ANALYSIS_SUMMARY).read_text())


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_gets_a_small_summary_and_a_full_report(planted_outputs, name):
    root, out = planted_outputs[name]
    summary = summary_of(out)
    assert len((out / schema.ANALYSIS_SUMMARY).read_bytes()) <= 50_000
    assert summary["status"] == "ok" and summary["identity"]["rank_count"] == len(
        json.loads((root / "ground_truth.json").read_text())["ranks"]
    )
    findings = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]
    counts = summary["finding_counts"]
    assert counts["rollup_overflow"] == 0 and counts["rollup_groups"] == len(summary["findings"])  # all fit
    # every finding is in exactly one group, and in its type's count
    assert sum(g["occurrences"] for g in summary["findings"]) == counts["total"] == len(findings)
    assert counts["by_type"] == dict(collections.Counter(f["finding_type"] for f in findings))
    report = (out / schema.REPORT_MD).read_text()
    headers = [line[3:].split(". ", 1)[1] for line in report.splitlines() if line.startswith("## ")]
    assert tuple(headers) == SECTIONS
    for finding in findings:  # every finding appears with its evidence ids in the markdown
        assert all(f"`{e}`" in report for e in finding["evidence_ids"][:1]), finding["finding_type"]
    # fast mode writes no Perfetto trace unless asked (--trace): it is as large as the kernels it draws
    assert not (out / schema.REPORT_TRACE).exists() and "trace" not in summary["artifacts"]


TRACED = ["slow_rank", "pipeline_parallel", "host_stalls", "mixed", "ep_imbalance"]


@pytest.mark.parametrize("name", TRACED)
def test_the_trace_asked_for_in_fast_mode_draws_every_rank_and_finding(planted_outputs, name, tmp_path):
    root, planted = planted_outputs[name]
    out = tmp_path / "out"
    shutil.copytree(planted, out)
    analyze(None, out, jobs=1, options=AnalyzeOptions(trace=True), stage_range=StageRange(only_stage="report"))
    assert summary_of(out)["artifacts"]["trace"] == schema.REPORT_TRACE
    findings = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]
    trace = json.loads((out / schema.REPORT_TRACE).read_text())
    events = trace["traceEvents"]
    assert all(isinstance(e["ts"], (int, float)) for e in events if "ts" in e)
    processes = {e["pid"] for e in events if e.get("name") == "process_name"}
    assert processes == {int(r) for r in json.loads((root / "ground_truth.json").read_text())["ranks"]}
    assert len([e for e in events if e.get("cat") == "finding"]) == len([f for f in findings if f["evidence_ids"]])


def test_each_finding_group_cites_resolvable_evidence_and_its_notes(planted_outputs):
    _, out = planted_outputs["mixed"]
    summary = summary_of(out)
    assert {g["finding_type"] for g in summary["findings"]} >= {"slow_rank_suspected", "ep_load_imbalance_suspected"}
    for group in summary["findings"]:
        assert group["evidence_sample"], group
        for sample in group["evidence_sample"]:
            assert Path(sample["source_path"]).is_file() and sample["rows"][0] <= sample["rows"][1]
        refs = group["knowledge_refs"]
        assert 1 <= len(refs) <= 3 and all({"ref", "title", "excerpt", "score"} <= set(r) for r in refs)
        note = next(n for n in knowledge.notes() if n["ref"] == refs[0]["ref"])
        assert group["finding_type"] in note["finding_types"]  # the note written for it comes first


def test_a_finding_cites_only_the_notes_that_explain_it(planted_outputs):
    def refs(scenario: str, finding_type: str) -> list[str]:
        groups = summary_of(planted_outputs[scenario][1])["findings"]
        (group,) = [g for g in groups if g["finding_type"] == finding_type]
        return [Path(r["ref"]).name for r in group["knowledge_refs"]]

    slow = refs("slow_rank", "slow_rank_suspected")  # "the others wait for it": the wait-anchor note fits
    assert slow[0] == "slow_rank.md" and not {"ep_imbalance.md", "slow_link.md", "pp_schedule.md"} & set(slow)
    assert refs("exposed_aicpu", "aicpu_exposed") == ["aicpu.md"]  # not the reduced-work or PP notes
    # a slow rank whose clock is throttled: the finding names the clock, and so cites its note too
    throttled = refs("throttled_card", "slow_rank_suspected")
    assert throttled[0] == "slow_rank.md" and "aicore_freq.md" in throttled


def test_every_finding_type_has_a_knowledge_note():
    types = set(knowledge.load("diagnosis_rules")["findings"])
    covered = {t for note in knowledge.notes() for t in note["finding_types"]}
    assert types <= covered, types - covered
    assert all(note["body"] and note["title"] for note in knowledge.notes())


def test_analyze_prints_the_status_and_where_the_report_is(planted_outputs):
    _, out = planted_outputs["slow_rank"]
    manifest = json.loads((out / schema.REPORT_MANIFEST).read_text())
    assert manifest["status"] == "ok" and manifest["xlsx_status"].startswith("skipped")
    assert set(manifest["files"]) >= {schema.ANALYSIS_SUMMARY, schema.REPORT_MD}
    assert schema.REPORT_TRACE not in manifest["files"]  # fast mode: only with --trace


def test_segmentation_errors_make_a_root_degraded_not_ok():
    empty = pd.DataFrame({"evidence_id": []})
    inputs = ReportInputs(
        "x", "fast", {"segment": {"hard_error_count": 2, "interior_island_total": 0}}, [], *[empty] * 10
    )
    status, reasons = _status(inputs)
    assert status == "degraded" and "2 hard errors" in reasons[0]
    inputs = ReportInputs("x", "fast", {"segment": {}}, [{"evidence_ids": ["r0.step9"]}], *[empty] * 10)
    assert _status(inputs)[0] == "degraded"
    assert _status(ReportInputs("x", "fast", {"segment": {}}, [], *[empty] * 10)) == ("ok", [])


def test_findings_with_one_type_severity_and_summary_roll_up_into_one_group_counting_each():
    from npuprof.pipeline.stages.report.summary import finding_groups

    def finding(claim: str, summary: str, saved: float) -> dict:
        return {
            "finding_type": "device_idle_bubble",
            "severity": "warning",
            "summary": summary,
            "claim_id": claim,
            "rank_ids": [int(claim[-1])],
            "evidence_ids": [],
            "statistic": {"name": "idle", "value": 1, "threshold": 0},
            "confidence": "high",
            "limitations": [],
            "recoverable_ms_per_step": saved,
            "recoverable_share_of_step": saved / 100,
        }

    empty = pd.DataFrame({"evidence_id": []})
    findings = [finding("c0", "same", 1.0), finding("c1", "same", 3.0), finding("c2", "other", 2.0)]
    inputs = ReportInputs("x", "fast", {"segment": {}}, findings, *[empty] * 10)
    groups, overflow = finding_groups(inputs)
    assert overflow == 0 and [(g["summary"], g["occurrences"]) for g in groups] == [("same", 2), ("other", 1)]
    assert groups[0]["recoverable_ms_per_step"] == 3.0 and groups[0]["affected"]["rank_ids"] == [0, 1]


def test_hostile_kernel_names_stay_inert_in_every_report_artifact(tmp_path):
    root = Path(generate(tmp_path / "root", "clean", seed=3, ranks=2)["root"])
    plant_hostile_names(root)
    out = tmp_path / "out"
    analyze(root, out, jobs=2, options=AnalyzeOptions(mode="full"))
    operators = (out / schema.OPERATOR_SUMMARY_CSV.file).read_text()
    assert HOSTILE["formula"] in operators and HOSTILE["script"] in operators  # the names reached the tables
    book = load_workbook(io.BytesIO((out / schema.REPORT_XLSX).read_bytes()))
    seen = set()
    for sheet in book.worksheets:
        for row in sheet.iter_rows():
            for cell in row:
                assert cell.data_type != "f", (sheet.title, cell.coordinate, cell.value)
                if cell.value in HOSTILE.values():
                    seen.add(cell.value)
    assert seen == set(HOSTILE.values())  # present, as text
    assert {"README", "case_summary", "operator_summary", "diagnosis_findings"} <= set(book.sheetnames)
    # a spreadsheet a person can use: numbers as numbers, readable times, filters, every sheet explained
    case = {row[0].value: row[1] for row in book["case_summary"].iter_rows(min_row=2)}
    assert case["rank_count"].value == 2 and case["rank_count"].data_type == "n"
    steps = [[c.value for c in row] for row in book["step_summary"].iter_rows()]
    header, first = steps[0], dict(zip(steps[0], steps[1]))
    assert not [h for h in header if h.endswith("_ns")] and 0 <= first["start_us_from_start"] < 1e7
    raw = pd.read_csv(out / schema.STEP_SUMMARY.file)
    assert first["wall_ms"] == pytest.approx(raw["wall_ms"].iloc[0])
    # and when it happened, as a date a spreadsheet sorts and filters
    assert first["start_utc"] == pd.to_datetime(raw["start_ns"].iloc[0], unit="ns").floor("ms").to_pydatetime()
    readme = {row[0].value: row[1].value for row in book["README"].iter_rows(min_row=2)}
    for sheet in book.worksheets[1:]:
        assert sheet.auto_filter.ref and sheet.auto_filter.ref.startswith("A1:"), sheet.title
        assert sheet.title in readme and readme[sheet.title] != sheet.title, sheet.title  # a sentence, not a name
    empty = [[c.value for c in row] for row in book["step_trace_accounting"].iter_rows()]
    assert empty[1][0] == "(no rows)" and "every rank has device events" in empty[1][1]
    report = (out / schema.REPORT_MD).read_text()
    assert "<script>" not in report
    top = pd.read_csv(out / schema.OPERATOR_CLASS_SUMMARY_CSV.file)
    top = top[~top["op_type"].isin(["communication", "mix_comm_aiv"])].head(15)
    assert HOSTILE["script"] in set(top["name"])  # it is in the operator view, so it must be there escaped
    assert "&lt;script&gt;alert\\(1\\)&lt;/script&gt;" in report or "&lt;script&gt;alert(1)&lt;/script&gt;" in report
    json.loads((out / schema.ANALYSIS_SUMMARY).read_text())
    json.loads((out / schema.REPORT_TRACE).read_text())  # names are escaped JSON strings
    manifest = json.loads((out / schema.REPORT_MANIFEST).read_text())
    assert manifest["xlsx_status"] == "ok" and manifest["report_mode"] == "full"


def _measure(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of [start, end) intervals as sorted disjoint intervals."""
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _minus(covered: list[tuple[float, float]], cut: list[tuple[float, float]]) -> float:
    """Length of ``covered`` (disjoint) outside ``cut`` (disjoint)."""
    total = 0.0
    for a, b in covered:
        inside = sum(max(0.0, min(b, d) - max(a, c)) for c, d in cut)
        total += (b - a) - inside
    return total


def test_the_qwen3_report_leads_with_the_pp_wait_checked_against_the_raw_csvs(sample_outputs):
    """Rank 0 of the real Qwen3 capture (TP1 PP2 DP2) spends 39 % of its step in exposed pipeline
    send/receive: the headline says so first, with the number an independent interval count over
    the raw kernel_details.csv gives, and the step split equals the vendor's step_trace_time.csv."""
    from conftest import QWEN_TRAINING

    out, _ = sample_outputs["qwen3_training"]
    headline = summary_of(out)["headline"]
    (rank0,) = [g for g in headline["groups"] if g["ranks"] == [0]]
    first = rank0["costs"][0]
    assert first["label"] == "exposed PP send_recv communication" and first["share"] == pytest.approx(0.3875, abs=1e-3)
    raw = pd.read_csv(QWEN_TRAINING / "rank_0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
    raw = raw.assign(end=raw["Start Time(us)"] + raw["Duration(us)"])
    is_comm = raw["Accelerator Core"] == "COMMUNICATION"
    send_recv = raw[is_comm & raw["Name"].str.contains("batchSendRecv")]
    compute = _measure(list(zip(raw[~is_comm]["Start Time(us)"], raw[~is_comm]["end"])))
    exposed_ms = _minus(_measure(list(zip(send_recv["Start Time(us)"], send_recv["end"]))), compute) / 1000
    assert first["ms_per_step"] == pytest.approx(exposed_ms, abs=0.01)
    # the step runs from where the profiler started it: the vendor's Stage plus its Preparing
    vendor = pd.read_csv(QWEN_TRAINING / "rank_0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv").iloc[0]
    assert rank0["wall_ms"] == pytest.approx((vendor["Stage"] + vendor["Preparing"]) / 1000, abs=1e-3)
    assert headline["text"][0].startswith("rank 0: of a 810.2 ms step, 313.9 ms (39%) exposed PP send_recv")
    # ranks 1 and 3 hold no kernels: they are told from their step_trace_time.csv, as the vendor does
    traced = {g["ranks"][0]: g for g in headline["groups"] if g["source"] == "step_trace_time.csv"}
    assert sorted(traced) == [1, 3] and all(len(g["ranks"]) == 1 for g in traced.values())
    # no config says how many layers to expect: the report names what the fingerprint points at (the
    # catalog's Qwen3-0.6B has 28 layers, the two stages' 14 each) and how to have it checked
    (validation,) = [
        line for line in (out / "report" / "report.md").read_text().splitlines() if line.startswith("Layer validation")
    ]
    assert "closest to Qwen3-0.6B with 28 decoder layers, as the 2 pipeline stages" in validation
    assert "`--model-id Qwen3-0.6B`" in validation
    trace = pd.read_csv(out / schema.STEP_TRACE_ACCOUNTING_CSV.file).set_index("rank_id")
    for rank in (1, 3):
        vendor_row = pd.read_csv(
            QWEN_TRAINING / f"rank_{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
        ).iloc[0]
        assert trace.loc[rank, "wall_ms"] == pytest.approx(vendor_row["Stage"] / 1000)
        assert trace.loc[rank, "exposed_comm_ms"] == pytest.approx(vendor_row["Communication(Not Overlapped)"] / 1000)
    assert trace.loc[1, "exposed_comm_ms"] == pytest.approx(441.708, abs=1e-3)  # of an 809.4 ms step
    # rank 1 (stage 0's DP peer) waits like rank 0; rank 3 (stage 1's) computes like rank 2
    assert traced[1]["costs"][0]["cost"] == "step_trace_time.csv: exposed communication"
    assert traced[3]["costs"][0]["cost"] == "step_trace_time.csv: compute"
    assert (
        "rank 1 (from step_trace_time.csv): of a 809.4 ms step, 441.7 ms (55%) exposed communication"
        in (headline["text"])[1]
    )
    assert headline["ranks_without_accounting"] == []
    # the accounting the headline is read from equals the vendor's step split (µs)
    vendor = pd.read_csv(QWEN_TRAINING / "rank_0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv").iloc[0]
    accounting = pd.read_csv(out / schema.STEP_TIME_ACCOUNTING_CSV.file)
    primary = accounting[(accounting["rank_id"] == 0) & (accounting["breakdown"] == "primary")]
    by_category = primary.groupby("category")["ms"].sum() * 1000
    assert by_category["compute"] == pytest.approx(vendor["Computing"], abs=0.5)
    assert by_category["communication"] == pytest.approx(vendor["Communication(Not Overlapped)"], abs=0.5)
    # idle: the device's Free, and the step's time before its first kernel (Preparing)
    assert by_category["idle"] == pytest.approx(vendor["Free"] + vendor["Preparing"], abs=0.5)
    report = (out / schema.REPORT_MD).read_text()
    assert report.index("313.9 ms (39%) exposed PP send\\_recv") < report.index("Executive Summary")
    # the findings say why: stage 1 (rank 2) computes 1.73x stage 0 — the ratio an interval count of
    # the two ranks' raw compute kernels gives — and 2 micro-batches over 2 stages leave a third idle
    findings = {f["finding_type"]: f for f in summary_of(out)["findings"]}

    def compute_only_us(rank: int) -> float:
        """Compute with no communication beside it: the accounting's (and the vendor's) Computing."""
        kernels = pd.read_csv(
            QWEN_TRAINING / f"rank_{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
        )
        spans = list(zip(kernels["Start Time(us)"], kernels["Start Time(us)"] + kernels["Duration(us)"]))
        comm = (kernels["Accelerator Core"] == "COMMUNICATION").to_numpy()
        return _minus(
            _measure([s for s, c in zip(spans, comm) if not c]), _measure([s for s, c in zip(spans, comm) if c])
        )

    ratio = compute_only_us(2) / compute_only_us(0)
    imbalance = findings["pp_stage_imbalance"]
    assert imbalance["affected"]["rank_ids"] == [2] and imbalance["statistic"]["value"] == pytest.approx(
        ratio, rel=1e-3
    )
    assert "Exp" in imbalance["summary"] and "(only there)" in imbalance["summary"]  # the softmax of the loss
    schedule = pd.read_csv(out / schema.PP_SCHEDULE_CSV.file).set_index("rank_id")
    # the bubble is the wait for the neighbour stage, not every idle gap: the gaps under 0.5 ms between
    # rank 0's kernels (an interval count over the raw CSV) are its dispatch gaps, a ledger line of their
    # own; the bubble holds the exposed send / recv and at most the long gaps and the embedding sync's wait
    busy = _measure(list(zip(raw["Start Time(us)"], raw["end"])))
    gaps = pd.Series([b[0] - a[1] for a, b in zip(busy[:-1], busy[1:])])
    ledger = pd.read_csv(out / schema.STEP_LEDGER_CSV.file)
    dispatch = ledger[(ledger["rank_id"] == 0) & (ledger["line"] == "idle dispatch gaps")]["ms"].sum()
    assert dispatch == pytest.approx(gaps[gaps < 500].sum() / 1000, abs=0.05) and dispatch > 100  # ns rounding
    embedding = raw[is_comm & raw["Name"].str.contains("allReduce") & (raw["Duration(us)"] > 0)]
    bound = exposed_ms + gaps[gaps >= 500].sum() / 1000 + embedding["Duration(us)"].sum() / 1000
    assert exposed_ms <= schedule.loc[0, "bubble_ms"] <= bound
    assert findings["pp_bubble_heavy"]["statistic"]["value"] == pytest.approx(schedule["bubble_share"].mean(), abs=1e-6)
    assert schedule.loc[0, "schedule"] == "F0 F1 B0 B1" and schedule.loc[2, "schedule"] == "F0 B0 F1 B1"  # 1F1B
    assert (schedule["micro_batches"] == 2).all() and schedule["ideal_bubble_share"].tolist() == [1 / 3] * 2
    assert schedule.loc[0, "pp_exposed_ms"] == pytest.approx(exposed_ms, abs=0.01)
    assert "pp\\_stage\\_imbalance" in report.split("Executive Summary")[1].split("##")[0]
    # words a person reads: steps counted once, percent shares, no "None", a glossary of the derived metrics
    executive = report.split("Executive Summary")[1].split("##")[0]
    assert "1 complete step (id 13) on 2 ranks" in executive and "4 ranks," in executive
    assert "compute 39.0 %" in executive
    assert "None" not in report and "1 ranks" not in report
    assert "expected layers: not known (no config.json or --model-id); detected per rank: 14" in report
    glossary = report.split("Glossary")[1]
    for term in ("underfeed_ms", "rank_duration_skew_ratio", "exposed communication", "recoverable time"):
        assert term in glossary, term
    # one word for the device's wait in what people read: idle (the glossary ties it to the CSVs' underfeed)
    assert "underfeed" not in report.split("Glossary")[0] and "| idle\\_ms |" in report
    # a kernel on two core types (MatMulV3: aic and mix_cv) is the largest compute kernel over both
    raw = pd.concat(
        pd.read_csv(QWEN_TRAINING / f"rank_{r}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
        for r in (0, 2)
    )
    by_type = raw[raw["Accelerator Core"] != "COMMUNICATION"].groupby("Type")["Duration(us)"].sum()
    assert by_type.idxmax() == "MatMulV3" and by_type.nlargest(2).index[1] == "FlashAttentionScoreGrad"
    top = summary_of(out)["kpis"]["top_operator_classes"][0]
    assert "MatMulV3" in top["name"]
    assert top["all_cores_duration_ms"] == pytest.approx(by_type["MatMulV3"] / 1000, abs=1e-3)
    assert top["core_split"].startswith("aic 110.7 ms; mix_cv 36.8 ms")
    operator_view = report.split("Top compute operators")[1]
    assert operator_view.index("MatMulV3") < operator_view.index("FlashAttentionScoreGrad")
    # HCCL calls are ranked per kind and group (hcom_batchSendRecv__128_*), never one call at a time
    classes = pd.read_csv(out / schema.OPERATOR_CLASS_SUMMARY_CSV.file)
    comm_classes = classes[classes["op_type"] == "communication"].set_index("name")
    raw_comm = raw[raw["Accelerator Core"] == "COMMUNICATION"]
    families = raw_comm["Name"].str.replace(r"_\d+_\d+$", "_*", regex=True)
    expected = raw_comm.groupby(families)["Duration(us)"].sum()
    assert sorted(comm_classes.index) == sorted(expected.index)
    assert comm_classes["duration_sum_us"].reindex(expected.index).to_numpy() == pytest.approx(expected.to_numpy())
    blocks = pd.read_csv(out / schema.BLOCK_CLASS_SUMMARY_CSV.file)
    assert not blocks["top_ops"].fillna("").str.contains(r"hcom_\w+__\d{3}_\d+_\d+=").any()


def test_every_scenario_names_its_biggest_costs_even_without_findings(planted_outputs):
    _, out = planted_outputs["clean"]
    headline = summary_of(out)["headline"]
    assert headline["text"] and all(len(g["costs"]) == 3 for g in headline["groups"])
    for group in headline["groups"]:
        shares = [c["share"] for c in group["costs"]]
        assert shares == sorted(shares, reverse=True) and sum(shares) <= 1.0 + 1e-6


def test_the_longest_idle_windows_of_each_rank_hold_the_longest_of_the_root():
    # durations with many ties, over three ranks: report.html's windows, read rank by rank
    rng = np.random.default_rng(5)
    windows = [
        pd.DataFrame({"rank_id": rank, "duration_us": rng.integers(0, 20, size), "start_ns": np.arange(size)})
        for rank, size in ((0, 90), (1, 7), (2, 60))
    ]
    root = pd.concat(windows, ignore_index=True)
    for cap in (5, 40, 80, 200):
        whole = root.nlargest(cap, "duration_us") if len(root) > cap else root
        reduced = longest_windows(windows, cap)
        drawn = reduced.nlargest(cap, "duration_us") if len(reduced) > cap else reduced
        pd.testing.assert_frame_equal(drawn.reset_index(drop=True), whole.reset_index(drop=True))


def test_the_streamed_trace_is_the_held_one_and_caps_each_rank(tmp_path, monkeypatch):
    # fast mode writes trace.json rank by rank from disk; full mode from the kernels it holds for
    # report.html: the two files are the same bytes, and each rank keeps its earliest kernels
    monkeypatch.setattr(report_stage, "MAX_KERNELS_PER_RANK", 300)
    root = Path(generate(tmp_path / "root", "host_stalls", seed=3, ranks=2)["root"])
    out = tmp_path / "out"
    analyze(root, out, jobs=1, options=AnalyzeOptions(trace=True))
    streamed = (out / schema.REPORT_TRACE).read_bytes()
    analyze(None, out, jobs=1, options=AnalyzeOptions(mode="full"), stage_range=StageRange(only_stage="report"))
    assert (out / schema.REPORT_TRACE).read_bytes() == streamed
    trace = json.loads(streamed)["traceEvents"]
    idle = [e for e in trace if e.get("cat") == "idle"]
    assert len(idle) == len(pd.read_parquet(out / schema.BUBBLE_WINDOWS.path)) > 0
    for rank in (0, 1):
        events = pd.read_parquet(out / schema.NORMALIZED_EVENTS.partition(rank))
        drawn = sorted(e["ts"] for e in trace if e.get("cat") == "kernel" and e["pid"] == rank)
        assert len(events) > 300 and len(drawn) == 300
        # the 300 drawn are the earliest: the next kernel starts no earlier than the last drawn one
        rebased = np.sort(events["start_ns"].to_numpy())
        assert (rebased[299] - rebased[0]) / 1000 == pytest.approx(drawn[-1] - drawn[0], abs=1e-3)


def test_the_glossary_says_where_a_step_starts_as_the_walls_are_measured():
    """A step's wall runs from where the profiler started it (Preparing before its first kernel), as
    step_summary and the ledger measure it, not from its first device event."""
    from npuprof.pipeline.stages.report.glossary import glossary_markdown

    (line,) = [line for line in glossary_markdown().splitlines() if line.startswith("- **step wall**")]
    assert "Preparing" in line and "Stage" in line


def test_the_readmes_qwen3_figures_are_the_analysis(sample_outputs):
    """The README's figures for the Qwen3 capture are what the analysis of it says: stage 0's wait for its
    neighbour (share and ms, pp_schedule.csv), its dispatch gaps (the ledger's line) and the last stage's
    eager loss (its kernels' ms a step, the fused loss's, and what the replay recovers)."""
    import re

    from conftest import REPO

    out, _ = sample_outputs["qwen3_training"]
    text = " ".join((REPO / "README.md").read_text().split())
    share, ms = re.search(r"waiting for its neighbour (\d+) % of its step \((\d+) ms", text).groups()
    (dispatch,) = re.search(r"its (\d+) ms of sub-0\.5 ms dispatch gaps", text).groups()
    schedule = pd.read_csv(out / schema.PP_SCHEDULE_CSV.file).set_index("rank_id")
    assert int(share) == round(100 * schedule.loc[0, "bubble_share"]) and int(ms) == round(schedule.loc[0, "bubble_ms"])
    ledger = pd.read_csv(out / schema.STEP_LEDGER_CSV.file)
    line = ledger[(ledger["rank_id"] == 0) & (ledger["line"] == "idle dispatch gaps")]
    assert int(dispatch) == round(line["ms"].sum())
    kernel_ms, fused_ms, saved_ms = re.search(
        r"spends (\d+) ms a step on an eager fp32 cross-entropy .* about (\d+) ms of it, and the step replayed "
        r"gets (\d+) ms shorter",
        text,
    ).groups()
    findings = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]
    (loss,) = [f for f in findings if f["finding_type"] == "unfused_loss_chain"]
    assert loss["rank_ids"] == [2] and loss["metrics"]["dtype"] == "fp32"
    assert int(kernel_ms) == round(loss["metrics"]["kernel_ms"]) and int(fused_ms) == round(loss["metrics"]["fused_ms"])
    assert int(saved_ms) == round(loss["recoverable_ms_per_step"])


def test_each_finding_says_what_to_try_where_a_person_reads_it(sample_outputs):
    """The remedy reaches the user: on the Qwen3 capture the eager fp32 loss finding names the fused loss
    to use (Megatron's --cross-entropy-loss-fusion, from knowledge/detectors/loss_chain/loss_chain.md) in
    analysis_summary.json and report.md; a finding type whose note has bullets per type gets its own."""
    from npuprof.pipeline.stages.report.notes import remedy

    out, _ = sample_outputs["qwen3_training"]
    summary = json.loads((out / schema.ANALYSIS_SUMMARY).read_text())
    (loss,) = [g for g in summary["findings"] if g["finding_type"] == "unfused_loss_chain"]
    assert "--cross-entropy-loss-fusion" in loss["remedy"]["text"]
    assert loss["remedy"]["ref"] == "knowledge/detectors/loss_chain/loss_chain.md"
    report = (out / schema.REPORT_MD).read_text()
    assert "- what to try: Use the framework's fused loss: Megatron-core's" in report
    assert remedy("host_launch_bound")["text"].startswith("Enable the task queue (`TASK_QUEUE_ENABLE=2`)")
    assert "micro-batch count" in remedy("pp_bubble_heavy")["text"]
    assert "micro-batch count" not in remedy("pp_stage_imbalance")["text"]
    assert remedy("no_such_finding") is None


def test_a_note_of_several_sections_gives_each_finding_its_own_remedy():
    """A note written for several finding types, one section each (serving.md), gives each type the bullet
    its ``remedy_bullets`` names, in whichever section's "What to try" it stands: the eager fallback is
    told to find why the runner skipped its graph, not the host gap's async scheduling (the first
    section's, which every type of the note got before). Every label of every note names a bullet."""
    from npuprof.pipeline.stages.report.notes import remedy

    assert remedy("serving_host_gap")["text"].startswith("Let the host ready the next forward")
    assert remedy("eager_fallback")["text"].startswith("Find why the runner skipped the graph")
    assert remedy("graph_padding_waste")["text"].startswith("Capture graphs at the batch sizes the server runs")
    for note in knowledge.notes():
        bullets = [
            line.removeprefix("- ")
            for section in note["body"].split("\n\n")
            if section.startswith("**What to try.**")
            for line in section.splitlines()
            if line.startswith("- ")
        ]
        for finding_type, label in note["remedy_bullets"].items():
            assert any(b.startswith((f"*{label}:*", label)) for b in bullets), (note["ref"], finding_type)


@pytest.mark.parametrize(
    "value, shown",
    [(2846.3, "2,846"), (28.46, "28.5"), (2.846, "2.85"), (0.2846, "0.285"), (0.0, "0"), (0.0004, "<0.001")],
)
def test_a_time_in_the_report_is_never_an_exponent(value, shown):
    """report.md wrote a 2.8 s saving as "2.85e+03 ms/step" (``:.3g``): three significant digits, no exponent."""
    from npuprof.pipeline.mdtext import ms_text
    from npuprof.pipeline.stages.report.markdown import _saving

    assert ms_text(value) == shown
    assert (
        _saving({"recoverable_ms_per_step": 2846.3, "recoverable_share_of_step": 0.5}) == "recovers 2,846 ms/step (50%)"
    )


def test_a_finding_whose_replay_saves_nothing_says_so_not_zero_ms(sample_outputs):
    """The CNN capture holds 2 of its all-reduce group's 8 members: fixing its blocking sync or its launch
    gaps alone saves nothing the capture can show (its ranks would wait longer for the missing members).
    The report said "recovers 0.00 ms/step"; it says it recovers nothing this capture can show, and why."""
    out, _ = sample_outputs["text_level2"]
    findings = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]
    nothing = [
        f for f in findings if f.get("recoverable_ms_per_step") is not None and f["recoverable_ms_per_step"] < 0.01
    ]
    assert {f["finding_type"] for f in nothing} >= {"blocking_sync_in_step"}
    assert all("wait longer for the group members" in " ".join(f["limitations"]) for f in nothing)
    report = (out / "report" / "report.md").read_text()
    assert "recovers 0 ms/step" not in report and "recovers nothing this capture can show" in report


def test_the_report_says_what_its_ledger_tables_leave_out_and_how_many_layers_a_rank_holds(sample_outputs):
    """report.md on Qwen3: each rank's costliest ledger lines end with how many more lines and ms the rest
    hold (read back from step_ledger.csv), the ranks in rank order; the capture table gives each stage's
    14 decoder layers (Qwen3-0.6B's 28 over 2 stages) beside the 56 layer passes a step runs (2 micro-
    batches, forward and backward), where "layers 56" stood beside "detected per rank: 14"."""
    import re

    out, _ = sample_outputs["qwen3_training"]
    report = (out / schema.REPORT_MD).read_text()
    ledger = pd.read_csv(out / schema.STEP_LEDGER_CSV.file)
    complete = ledger[ledger["complete"].astype(bool)]
    said = re.findall(r"\*\*Rank (\d+)\*\*.*?… and (\d+) more lines, ([\d.]+) ms per step", report, re.S)
    assert [int(rank) for rank, _, _ in said] == sorted(complete["rank_id"].unique()) == [0, 2]
    for rank, more, ms in said:
        mine = complete[complete["rank_id"] == int(rank)]
        per_line = mine.groupby(["line", "explained_by"])["ms"].sum() / mine["step_ordinal"].nunique()
        rest = per_line.sort_values(ascending=False).iloc[5:]
        assert int(more) == len(rest) and float(ms) == pytest.approx(rest.sum(), abs=0.05)
    rows = re.findall(r"^\| (\d+) \| \d+ \| \d+ \| (\S+) \| (\S+) \|", report, re.M)
    assert rows == [("0", "14", "56"), ("2", "14", "56")]


def test_csv_timestamps_are_written_in_full_not_as_an_exponent(sample_outputs):
    """cited_evidence.csv and evidence_index.csv on Qwen3: a window's start and end in µs since 1970 read
    1764246877843020.750, where Arrow's shortest form wrote 1.7642468778430208e+15 (a spreadsheet keeps 15
    digits of that); read back they are the evidence table's own values."""
    out, _ = sample_outputs["qwen3_training"]
    evidence = pd.read_parquet(out / schema.EVIDENCE_INDEX.path).set_index("evidence_id")
    for name in (schema.REPORT_CITED_EVIDENCE, schema.EVIDENCE_INDEX_CSV.file):
        text = (out / name).read_text()
        assert "e+" not in text, name
        written = pd.read_csv(io.StringIO(text)).set_index("evidence_id")
        for column in ("start_us", "end_us"):
            assert written[column].to_numpy() == pytest.approx(
                evidence.loc[written.index, column].to_numpy(), abs=0.001, nan_ok=True
            )


def test_kernels_faster_than_their_roof_are_said_to_be_the_roofs_error(tmp_path):
    """The real CNN with its card named: dozens of vector kernels run faster than the HBM roof their shapes
    give (foreach lists served from cache). report.md printed efficiencies like 2.846 with no word; it says
    how many ran above their roof and that the roof, not the kernel, is off — the count read back from
    operator_efficiency_summary.csv — and no time is reclaimable there."""
    import re

    from conftest import PYTORCH_DATA

    out = tmp_path / "out"
    analyze(PYTORCH_DATA / "text" / "level2", out, jobs=1, options=AnalyzeOptions(hardware_model="Ascend910B4"))
    efficiency = pd.read_csv(out / schema.OPERATOR_EFFICIENCY_SUMMARY_CSV.file)
    above = efficiency[efficiency["roofline_efficiency"] > 1]
    assert len(above) > 10 and (above["reclaimable_us"] == 0).all()
    said = re.search(r"(\d+) kernel shapes ran faster than their roof", (out / schema.REPORT_MD).read_text())
    assert said and int(said.group(1)) == len(above)
