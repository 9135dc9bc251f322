"""cross_rank + diagnostics: each planted fault is found on the planted ranks, nothing is found
where nothing was planted, clocks are recovered, and every cited id resolves to its source rows."""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from conftest import SAMPLE_ROOTS
from helpers.reported import reported_findings

from npuprof import knowledge
from npuprof.pipeline import schema
from npuprof.pipeline.errors import BrokenEvidence
from npuprof.pipeline.runner import StageRange, analyze
from npuprof.pipeline.stage_order import STAGE_NAMES
from npuprof.pipeline.stages.diagnostics import registry
from npuprof.pipeline.stages.diagnostics.cited_evidence import check_evidence
from npuprof.pipeline.stages.diagnostics.outliers import low_outliers
from npuprof.synth import SCENARIOS, generate
from npuprof.synth.faults import Fault

pytestmark = pytest.mark.xdist_group("planted")  # one worker: shares its fixtures


def findings_of(out: Path) -> list[dict]:
    return json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]


def truth_of(root: Path) -> dict:
    return json.loads((root / "ground_truth.json").read_text())


def planted_ranks(expected: dict, captured: list[int]) -> list[int]:
    """The ranks a planted finding names: the link's ends; the captured members that wait for an
    uncaptured straggler; else the fault's ranks (every captured rank when it names none)."""
    if expected["type"] == "slow_link_suspected":
        return sorted(expected["link"])
    if expected["type"] == "capture_incomplete_group":
        return sorted(set(captured) - set(expected["ranks"]))
    return sorted(expected.get("ranks") or captured)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_planted_fault_is_found_on_its_ranks(planted_outputs, name):
    root, out = planted_outputs[name]
    truth, findings = truth_of(root), reported_findings(out)  # a symptom merged into its cause counts
    for expected in truth["expected_findings"]:  # clock offsets and partial captures are checked elsewhere
        wanted = expected["type"]
        found = [f for f in findings if f["finding_type"] == wanted]
        assert found, f"{name}: planted {expected['type']} not reported; findings: {[f['summary'] for f in findings]}"
        ranks = sorted({r for f in found for r in f["rank_ids"]})
        assert ranks == planted_ranks(expected, sorted(int(r) for r in truth["ranks"])), (name, wanted, ranks)
        for finding in found:
            stat = finding["statistic"]
            assert {"name", "value", "threshold"} <= set(stat) and finding["evidence_ids"], finding
            # one rank is "rank 2", never "ranks 2" (nor "ranks 0 block" for "the host of rank 0 blocks")
            assert not re.search(r"\branks \d+(?![\d,])", finding["summary"]), finding["summary"]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_nothing_is_reported_that_was_not_planted(planted_outputs, name):
    """Every finding type a detector can report (the registry's, not a hand list) stays silent on every
    scenario that does not plant it: clean controls, twins and the other faults' scenarios alike."""
    root, out = planted_outputs[name]
    planted = {e["type"] for e in truth_of(root)["expected_findings"]}
    silent = {t for d in registry.detectors() for t in d.finding_types} - planted
    assert set(truth_of(root)["unexpected_findings"]) <= silent  # synth's list names registered types only
    loud = [f"{f['finding_type']}: {f['summary']}" for f in findings_of(out) if f["finding_type"] in silent]
    assert not loud, f"{name}: {loud}"


def test_a_planted_clock_offset_is_recovered_within_ten_percent(planted_outputs):
    root, out = planted_outputs["mixed"]
    offset = next(f for f in truth_of(root)["faults"] if f["kind"] == "clock_offset")
    manifest = json.loads((out / schema.stage_manifest_name("cross_rank")).read_text())
    offsets = {int(r): v for r, v in manifest["clock_offsets_us"].items()}
    (shifted,) = offset["ranks"]
    others = pd.Series([v for r, v in offsets.items() if r != shifted])
    assert offsets[shifted] - others.median() == pytest.approx(offset["offset_us"], rel=0.10)
    assert manifest["match_rate"] == 1.0 and manifest["unmatched_instances"] == 0


def test_the_slow_rank_is_found_when_its_own_clock_is_off(tmp_path):
    """Skew on the slow rank itself: absolute-time pairing would blame the wrong rank."""
    base = SCENARIOS["slow_rank"]
    faults = (*base.faults, Fault("clock_offset", ranks=(2,), offset_us=-9000.0))
    root = Path(generate(tmp_path / "root", replace(base, name="slow_rank_skewed", faults=faults), seed=3)["root"])
    analyze(root, tmp_path / "out", jobs=2)
    slow = [f for f in findings_of(tmp_path / "out") if f["finding_type"] == "slow_rank_suspected"]
    assert [f["rank_ids"] for f in slow] == [[2]]
    offsets = json.loads((tmp_path / "out" / schema.stage_manifest_name("cross_rank")).read_text())
    estimate = offsets["clock_offsets_us"]["2"] - pd.Series([offsets["clock_offsets_us"][r] for r in "013"]).median()
    assert estimate == pytest.approx(-9000.0, rel=0.10)


@pytest.mark.parametrize("name", ["slow_rank", "host_bubble", "ep_imbalance", "exposed_aicpu", "slow_link"])
def test_every_cited_id_resolves_to_its_source_rows(planted_outputs, name):
    _, out = planted_outputs[name]
    index = pd.read_csv(out / schema.EVIDENCE_INDEX_CSV.file).set_index("evidence_id")
    events = pd.read_parquet(out / schema.NORMALIZED_EVENTS, columns=["rank_id", "row_idx", "start_ns", "end_ns"])
    by_row = events.assign(rank_id=events["rank_id"].astype(int)).set_index(["rank_id", "row_idx"])
    alignment = pd.read_csv(out / schema.CROSS_RANK_ALIGNMENT_CSV.file).set_index("alignment_id")
    cited = 0
    for finding in findings_of(out):
        for evidence_id in finding["evidence_ids"]:
            entry = index.loc[evidence_id]
            assert Path(entry["source_path"]).is_file()
            first = by_row.loc[(int(entry["rank_id"]), int(entry["row_start"]))]
            last = by_row.loc[(int(entry["rank_id"]), int(entry["row_end"]))]
            if entry["kind"] == "communication_op":  # one event: the row is that op, at that time
                assert first["start_ns"] / 1000 == pytest.approx(entry["start_us"], abs=1e-3)
                assert last["end_ns"] / 1000 == pytest.approx(entry["end_us"], abs=1e-3)
            cited += 1
        assert set(finding["alignment_ids"]) <= set(alignment.index)
    assert cited


def test_an_unresolvable_id_fails_the_stage():
    finding = {
        "finding_type": "slow_rank_suspected",
        "claim_id": "x",
        "evidence_ids": ["r0.comm9"],
        "alignment_ids": [],
    }
    with pytest.raises(BrokenEvidence, match="r0.comm9"):
        check_evidence([{**finding, "limitations": []}], {"r0.comm1"}, set())
    with pytest.raises(BrokenEvidence, match="cites no evidence"):
        check_evidence([{**finding, "evidence_ids": [], "limitations": []}], set(), set())
    check_evidence([{**finding, "evidence_ids": [], "limitations": ["stated"]}], set(), set())


def test_dixon_q_flags_only_a_clear_low_outlier():
    # Dixon's textbook set (n = 10): Q = 0.455 < 0.466, no outlier; pull the low value down and it is one
    textbook = [0.189, 0.167, 0.187, 0.183, 0.186, 0.182, 0.181, 0.184, 0.181, 0.177]
    pulled = [0.189, 0.100, *textbook[2:]]  # rank 1: 0.167 -> 0.100
    rows = [("a", r, v) for r, v in enumerate(textbook)] + [("b", r, v) for r, v in enumerate(pulled)]
    values = pd.DataFrame(rows, columns=["alignment_id", "rank_id", "value"])
    critical = {10: 0.466}
    result = low_outliers(values, critical, 3.5, 0.0).set_index("alignment_id")
    assert result.loc["a", "statistic"] == pytest.approx(0.4545, abs=1e-3) and not result.loc["a", "outlier"]
    assert result.loc["b", "outlier"] and result.loc["b", "rank_id"] == 1


@pytest.mark.parametrize("name", sorted(SAMPLE_ROOTS))
def test_every_real_capture_runs_through_diagnostics_with_resolvable_evidence(sample_outputs, name):
    out, result = sample_outputs[name]
    findings = findings_of(out)
    assert result["diagnostics"]["finding_count"] == len(findings)
    index = pd.read_csv(out / schema.EVIDENCE_INDEX_CSV.file)
    for finding in findings:
        assert finding["evidence_ids"] or finding["limitations"], finding
        assert set(finding["evidence_ids"]) <= set(index["evidence_id"]), finding
    manifest = json.loads((out / schema.stage_manifest_name("cross_rank")).read_text())
    if result["rank_count"] < 2 or manifest["collective_instances"] == 0:
        assert manifest["match_rate"] is None and manifest["limitations"]
    if name == "qwen3_training":
        # ops of groups whose other members were not captured cannot match; every other op does
        assert manifest["match_rate_captured_groups"] == 1.0
        assert manifest["unmatched_partner_not_captured"] == manifest["unmatched_instances"] > 0


def tagged_steps(out: Path) -> pd.DataFrame:
    """step_summary with diagnostics' anomaly tags and their wording."""
    steps = pd.read_csv(out / schema.STEP_SUMMARY.file)
    tags = pd.read_csv(out / schema.STEP_ANOMALIES_CSV.file, dtype={"anomaly_tags": str, "anomaly_text": str})
    return steps.merge(
        tags[["rank_id", "step_ordinal", "anomaly_tags", "anomaly_text"]], on=["rank_id", "step_ordinal"]
    )


def test_the_planted_bubble_is_tagged_on_its_rank_and_steps_only(planted_outputs):
    root, out = planted_outputs["host_bubble"]
    fault = next(f for f in truth_of(root)["faults"] if f["kind"] == "device_idle_bubble")
    steps = tagged_steps(out)
    tagged = steps[steps["anomaly_tags"].fillna("").str.contains("INTERNAL_BUBBLE_HEAVY")]
    assert sorted(zip(tagged["rank_id"], tagged["step_id"])) == [(fault["ranks"][0], s) for s in fault["step_ids"]]
    assert (tagged["largest_internal_bubble_ms"] >= fault["gap_us"] / 1000 * 0.99).all()


def test_partial_steps_carry_the_boundary_tag(planted_outputs):
    root, out = planted_outputs["partial_capture"]
    steps = tagged_steps(out)
    partial = steps[(steps["rank_id"] == 0) & steps["anomaly_tags"].fillna("").str.contains("PARTIAL_CAPTURE_BOUNDARY")]
    assert set(partial["step_id"]) == set(truth_of(root)["ranks"]["0"]["partial_steps"])


def test_a_changed_diagnosis_threshold_needs_only_the_diagnostics_stage(tmp_path, monkeypatch):
    """Classify measures, diagnostics decides: raising the idle thresholds re-tags the steps and
    silences the bubble finding on a re-run from diagnostics, with every earlier artifact untouched."""
    root = generate(tmp_path / "root", "host_bubble", seed=5, ranks=2)["root"]
    out = tmp_path / "out"
    analyze(root, out, jobs=1)
    assert "device_idle_bubble" in {f["finding_type"] for f in reported_findings(out)}
    assert tagged_steps(out)["anomaly_tags"].fillna("").str.contains("INTERNAL_BUBBLE_HEAVY").any()
    before_diagnostics = STAGE_NAMES[: STAGE_NAMES.index("diagnostics")]
    earlier = {p: p.stat().st_mtime_ns for p in (out / schema.stage_manifest_name(s) for s in before_diagnostics)}
    rules = knowledge.load("diagnosis_rules")["anomaly_tags"]
    for tag in ("INTERNAL_BUBBLE_HEAVY", "PRELAUNCH_GAP_HEAVY", "TAIL_GAP_HEAVY"):
        monkeypatch.setitem(rules[tag], "min_ms", 1e9)  # no gap is that long
    monkeypatch.setitem(rules["DEVICE_IDLE_GAP_HEAVY"], "underfeed_ratio_min", 2.0)  # no step idles twice its wall
    result = analyze(None, out, jobs=1, stage_range=StageRange(from_stage="diagnostics"))
    assert result["stages_executed"] == ["diagnostics", "report"]
    assert "device_idle_bubble" not in {f["finding_type"] for f in reported_findings(out)}
    assert not tagged_steps(out)["anomaly_tags"].fillna("").str.contains("HEAVY").any()
    assert {p: p.stat().st_mtime_ns for p in earlier} == earlier


def test_the_planted_host_bubble_is_labelled_a_sync(planted_outputs):
    root, out = planted_outputs["host_bubble"]
    fault = next(f for f in truth_of(root)["faults"] if f["kind"] == "device_idle_bubble")
    windows = [json.loads(line) for line in (out / schema.BUBBLE_WINDOWS_JSONL).read_text().splitlines()]
    planted = [w for w in windows if w["duration_us"] >= fault["gap_us"] * 0.9]
    assert sorted(w["step_id"] for w in planted) == fault["step_ids"]
    for window in planted:
        assert window["rank_id"] in fault["ranks"]
        assert "possible_sync_or_h2d" in window["soft_attribution"]["soft_root_cause_labels"]
        assert window["soft_attribution"]["sync_overlap"] >= 0.9
    manifest = json.loads((out / schema.stage_manifest_name("evidence")).read_text())
    assert fault["ranks"][0] in manifest["host_trace"]["ranks_attributed"]


def test_a_broken_trace_is_a_stated_limitation_not_a_failure(tmp_path):
    root = Path(generate(tmp_path / "root", "host_bubble", seed=5, ranks=2)["root"])
    for trace in root.rglob("trace_view.json"):  # cut mid-event; rank 0 holds the planted bubble
        trace.write_bytes(trace.read_bytes()[: trace.stat().st_size // 2])
    result = analyze(root, tmp_path / "out", jobs=1)
    assert any("trace_view.json" in text for text in result["evidence"]["limitations"])
    manifest = json.loads((tmp_path / "out" / schema.stage_manifest_name("evidence")).read_text())
    statuses = {rank: entry["status"] for rank, entry in manifest["host_trace"]["by_rank"].items()}
    assert statuses == {"0": "unreadable", "1": "unreadable"}, statuses  # every rank with steps reads its trace
    assert (
        "broken JSON"
        in next(e for e in manifest["host_trace"]["by_rank"].values() if e["status"] == "unreadable")["error"]
    )


def test_the_analysis_facade_and_the_sweep_rollup_carry_the_findings(planted_outputs):
    from npuprof.api import Analysis
    from npuprof.pipeline.sweep.rollup import root_rollup

    _, out = planted_outputs["slow_rank"]
    analysis = Analysis(out)
    findings = analysis.findings()
    slow = findings[findings["finding_type"] == "slow_rank_suspected"]
    assert slow["rank_ids"].tolist() == [[2]] and all(isinstance(e, list) and e for e in slow["evidence_ids"])
    units = analysis.alignment()
    assert {"collective", "step", "layer"} <= set(units["alignment_type"])
    per_rank = analysis.alignment(collectives=True)
    assert per_rank.groupby("alignment_id")["rank_id"].nunique().max() == 4
    row = root_rollup(str(out), "slow", out)
    assert row["findings_total"] == len(findings)
    assert json.loads(row["findings_by_type"])["slow_rank_suspected"] == 1
    assert sum(json.loads(row["findings_by_severity"]).values()) == len(findings)


def test_outlier_test_skips_instances_too_small_to_test_without_a_warning():
    # an instance seen on one or two ranks (a subgroup collective, a rank missing) is not tested;
    # its median over nothing used to print "All-NaN slice encountered" on a healthy run
    rows = [("a", 0, 1.0), ("a", 1, 1.1), ("a", 2, 1.2), ("b", 0, 1.0), ("c", 0, 1.0), ("c", 3, 2.0)]
    values = pd.DataFrame(rows, columns=["alignment_id", "rank_id", "value"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = low_outliers(values, {3: 0.941}, 3.5, 0.0)
        assert list(result["alignment_id"]) == ["a"]
        assert low_outliers(values[values["alignment_id"] != "a"], {3: 0.941}, 3.5, 0.0).empty


def test_a_wait_anchor_is_an_annotation_of_its_operator_never_a_finding(planted_outputs):
    """An op that looks hot only because a stream waits in it shows on healthy runs too: it qualifies
    the operator evidence it names and claims nothing (no severity, no recoverable time)."""
    annotated = 0
    for name, (_, out) in planted_outputs.items():
        document = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())
        findings = document["diagnosis_findings"]
        assert "wait_anchor_false_hotspot" not in {f["finding_type"] for f in findings}, name
        operators = pd.read_csv(out / schema.OPERATOR_SUMMARY_CSV.file).set_index("evidence_id")
        for annotation in document["evidence_annotations"]:
            assert annotation["finding_type"] == "wait_anchor_false_hotspot", name
            assert annotation["severity"] is None and annotation["recoverable_ms_per_step"] is None
            (cited,) = annotation["evidence_ids"]
            op = operators.loc[cited]  # the operator it qualifies: its cost is nearly all wait
            assert op["wait_sum_us"] / (op["wait_sum_us"] + op["duration_sum_us"]) > 0.95, (name, cited)
        annotated += len(document["evidence_annotations"])
        assert document["counts"]["annotation_count"] == len(document["evidence_annotations"])
    assert annotated > 0  # the rule still runs: healthy DP all-reduces wait in such ops


def test_steps_are_numbered_by_their_captured_id_everywhere(planted_outputs):
    """One numbering: the planted text, the ground truth, the finding and the evidence all say step 11
    for the demo's bubble; evidence ids number steps by ordinal and say so (``r0.step#1``)."""
    for name, (root, _) in planted_outputs.items():
        truth = truth_of(root)
        mentioned = {int(n) for n in re.findall(r"\bsteps? (\d+)", truth["description"])}
        mentioned |= {int(n) for n in re.findall(r"\bsteps? \d+(?:-| and )(\d+)", truth["description"])}
        assert mentioned <= set(truth["step_ids"]), (name, truth["description"])
    root, out = planted_outputs["demo"]
    (fault,) = [f for f in truth_of(root)["faults"] if f["kind"] == "device_idle_bubble"]
    assert fault["step_ids"] == [11] and fault["step_ordinals"] == [1] and "step 11" in truth_of(root)["description"]
    # the bubble is a blocking .item(): one finding, blocking_sync_in_step, with the bubble's merged in
    (bubble,) = [f for f in reported_findings(out) if f["finding_type"] == "device_idle_bubble"]
    (cause,) = [f for f in findings_of(out) if f["claim_id"] == bubble["merged_into"]]
    assert cause["finding_type"] == "blocking_sync_in_step" and cause["rank_ids"] == fault["ranks"]
    assert not [f for f in findings_of(out) if f["finding_type"] == "device_idle_bubble"]
    assert "step 11" in bubble["summary"]
    index = pd.read_csv(out / schema.EVIDENCE_INDEX_CSV.file).set_index("evidence_id")
    steps = [e for e in bubble["evidence_ids"] if index.loc[e, "kind"] == "step_window"]
    assert steps and all(e.startswith("r0.step#") for e in steps)
    assert index.loc[steps[0], "summary"].startswith("step 11")


@pytest.mark.parametrize(("name", "cause"), [("slow_rank", "more work per step"), ("throttled_card", "a slower clock")])
def test_what_differs_on_the_slow_card_is_its_clock_or_its_work(planted_outputs, name, cause):
    """The planted slow rank computes factor × longer; a throttled card does so for the same cycles,
    a slow rank (the synth's more work) for factor × the cycles: the diff tells the two apart."""
    root, out = planted_outputs[name]
    fault = next(f for f in truth_of(root)["faults"] if f["kind"] in ("slow_rank_suspected", "aicore_freq_throttled"))
    (rank,) = fault["ranks"]
    diff = pd.read_csv(out / schema.SLOW_RANK_DIFF_CSV.file)
    assert set(diff["rank_id"]) == {rank}
    measures = diff.set_index(["level", "key"])
    throttled = fault.get("step_ordinals") or []
    counted = len(truth_of(root)["complete_steps"])
    expected = (len(throttled) * fault["factor"] + counted - len(throttled)) / counted if throttled else fault["factor"]
    assert measures.loc[("compute_work", "compute ms"), "ratio"] == pytest.approx(expected, rel=0.03)
    cycles = 1.0 if throttled else fault["factor"]
    assert measures.loc[("compute_work", "Mcycles"), "ratio"] == pytest.approx(cycles, rel=0.03)
    # its extra time is compute: the share the compute category explains is all of it
    assert measures.loc[("time", "compute"), "share_of_extra"] == pytest.approx(1.0, abs=0.05)
    (finding,) = [f for f in findings_of(out) if f["finding_type"] == "slow_rank_suspected"]
    assert f"({cause})" in finding["summary"] and "what differs on it" in finding["summary"]


@pytest.mark.parametrize("name", ["clean", "pipeline_balanced", "host_stalls"])
def test_no_slow_rank_no_diff(planted_outputs, name):
    _, out = planted_outputs[name]
    assert pd.read_csv(out / schema.SLOW_RANK_DIFF_CSV.file).empty
