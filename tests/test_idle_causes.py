"""Idle time by host cause: every idle gap of a step split among what the host was doing. Planted
stalls are found as their cause with their length, launch-bound steps as launch waits, clean steps
are the device's own; on real traces the launch of each kernel is the one the raw trace records."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import SAMPLE_ROOTS

from npuprof.pipeline import schema
from npuprof.pipeline.runner import StageRange, analyze
from npuprof.synth.timeline import DEVICE_GAP_US, HOST_LEAD_NS, STARVED_LEAD_NS, STEP_HEAD_US

pytestmark = pytest.mark.xdist_group("planted")  # shares planted_outputs

HOST_CAUSED = ["sync", "dataloader", "gc", "allocation", "launch", "unattributed"]


def truth_of(root: Path) -> dict:
    return json.loads((root / "ground_truth.json").read_text())


def idle_by_cause(out: Path) -> pd.DataFrame:
    """Per rank and step: ms of each cause (columns), from step_time_accounting.csv."""
    accounting = pd.read_csv(out / schema.STEP_TIME_ACCOUNTING_CSV.file)
    rows = accounting[accounting["breakdown"] == "idle_by_cause"]
    return rows.pivot_table(index=["rank_id", "step_ordinal"], columns="component", values="ms", aggfunc="sum")


@pytest.mark.parametrize("name", ["clean", "host_bubble", "host_stalls", "launch_bound", "pipeline_parallel"])
def test_the_causes_of_a_step_add_up_to_its_idle_time(planted_outputs, name):
    _, out = planted_outputs[name]
    accounting = pd.read_csv(out / schema.STEP_TIME_ACCOUNTING_CSV.file)
    idle = accounting[(accounting["breakdown"] == "primary") & (accounting["category"] == "idle")]
    idle = idle.groupby(["rank_id", "step_ordinal"])["ms"].sum()
    causes = idle_by_cause(out).sum(axis=1).reindex(idle.index, fill_value=0.0)
    assert np.allclose(causes.to_numpy(), idle.to_numpy(), atol=1e-6), (causes - idle).abs().max()


@pytest.mark.parametrize(
    ("name", "kind", "cause"),
    [
        ("host_stalls", "dataloader_stall", "dataloader"),
        ("host_stalls", "gc_pause", "gc"),
        ("host_stalls", "allocation_heavy", "allocation"),
        ("host_stalls", "dynamic_shape_recompile", "compile"),
        ("host_bubble", "device_idle_bubble", "sync"),
    ],
)
def test_each_planted_stall_is_its_cause_with_its_length_on_its_steps_only(planted_outputs, name, kind, cause):
    root, out = planted_outputs[name]
    truth = truth_of(root)
    fault = next(f for f in truth["faults"] if f["kind"] == kind)
    ranks = fault["ranks"] or [int(r) for r in truth["ranks"]]
    ordinals = fault["step_ordinals"] or list(range(len(truth["step_ids"])))  # none named: every step
    per_step = idle_by_cause(out)
    held = per_step.get(cause, pd.Series(0.0, index=per_step.index)).fillna(0.0)
    for (rank, ordinal), ms in held.items():
        planted = rank in ranks and ordinal in ordinals
        # the stall plus at most the launch of the kernel after it
        assert ms == pytest.approx(fault["gap_us"] / 1000.0, rel=0.01) if planted else ms == 0.0, (rank, ordinal, ms)
    windows = [json.loads(line) for line in (out / schema.BUBBLE_WINDOWS_JSONL).read_text().splitlines()]
    stalls = [w for w in windows if (w["idle_cause"] or {}).get("cause") == cause and w["duration_us"] >= 100]
    planted = {(r, o) for r in ranks for o in ordinals}
    assert {(w["rank_id"], w["step_ordinal"]) for w in stalls} == planted
    assert all(w["idle_cause"]["share"] >= 0.99 and w["duration_us"] >= fault["gap_us"] for w in stalls)
    # the host's own time in the class, device idle or not: the planted span, on the planted steps only
    api = pd.read_csv(out / schema.HOST_API_SUMMARY_CSV.file)
    activity = api[(api["layer"] == "activity") & (api["name"] == cause)]
    assert set(zip(activity["rank_id"], activity["step_ordinal"])) == planted
    assert np.allclose(activity["total_us"], fault["gap_us"], rtol=0.01)


def test_a_launch_bound_step_waits_for_every_compute_kernel_launch(planted_outputs):
    root, out = planted_outputs["launch_bound"]
    fault = next(f for f in truth_of(root)["faults"] if f["kind"] == "host_launch_bound")
    events = pd.read_parquet(out / schema.NORMALIZED_EVENTS, columns=["rank_id", "op_type"])
    steps = pd.read_csv(out / schema.STEP_SUMMARY.file)
    gaps = pd.read_parquet(out / schema.HOST_IDLE_GAPS)
    per_step = idle_by_cause(out)
    for rank, mine in steps.groupby("rank_id"):
        own = events[(events["rank_id"].astype(int) == rank) & (events["op_type"] != "communication")]
        first = mine["step_ordinal"].min()
        count = int(len(own) / len(mine))  # compute kernels per step
        # each waits the planted gap plus the device's own gap (uniform, its mean) for its launch; and
        # the step waits for its first launch from its start (synth starts it STEP_HEAD_US before its
        # first kernel)
        launch = per_step.loc[(rank, first), "launch"]
        expected_us = count * (fault["gap_us"] + np.mean(DEVICE_GAP_US)) + STEP_HEAD_US
        assert launch == pytest.approx(expected_us / 1000.0, rel=0.08)
        late = gaps[(gaps["rank_id"].astype(int) == rank) & (gaps["cause"] == "launch")]
        assert (late["launch_lead_us"] < 0).all() and len(late) >= count * len(mine) - len(mine)
    # every kernel's launch-to-start delay: the starved lead for compute kernels (most of them), the
    # usual lead for the all-reduces launched ahead; one row per step with every kernel of the step counted
    api = pd.read_csv(out / schema.HOST_API_SUMMARY_CSV.file)
    delays = api[api["layer"] == "launch"]
    assert len(delays) == len(steps)
    assert np.allclose(delays["p50_us"], STARVED_LEAD_NS / 1000, atol=0.3)
    assert np.allclose(delays["p99_us"], HOST_LEAD_NS / 1000, atol=0.3)
    per_rank = events.groupby(events["rank_id"].astype(int)).size()
    assert (delays.groupby("rank_id")["count"].sum() == per_rank.reindex(delays["rank_id"].unique())).all()


def test_clean_steps_idle_only_on_the_device_side(planted_outputs):
    _, out = planted_outputs["clean"]
    per_step = idle_by_cause(out)
    host = per_step[[c for c in HOST_CAUSED if c in per_step.columns]].fillna(0.0).sum(axis=1)
    wall = pd.read_csv(out / schema.STEP_SUMMARY.file).set_index(["rank_id", "step_ordinal"])["wall_ms"]
    assert (host / wall.reindex(host.index) < 0.01).all(), host


def raw_launches(trace: Path) -> dict[Decimal, Decimal]:
    """Device start (µs) → the latest host launch of the flows ending on it, read with json (exact
    decimals: the trace's times are text of µs with three decimals)."""
    events = json.loads(trace.read_text())
    starts, ends = {}, {}
    for event in events:
        category = str(event.get("cat", "")).lower()
        if event.get("ph") in ("s", "f") and category in ("async_npu", "hosttodevice"):
            side = starts if event["ph"] == "s" else ends
            side.setdefault((category, str(event["id"])), Decimal(str(event["ts"])))
    launches: dict[Decimal, Decimal] = {}
    for key, device in ends.items():
        if key in starts:
            launches[device] = max(launches.get(device, starts[key]), starts[key])
    return launches


@pytest.mark.parametrize("name", ["text_level0", "text_level1"])
def test_launch_leads_on_real_traces_are_the_raw_flows(tmp_path, name):
    root, _ = SAMPLE_ROOTS[name]
    out = tmp_path / "out"
    analyze(root, out, jobs=1, stage_range=StageRange(to_stage="evidence"))
    manifest = json.loads((out / schema.stage_manifest_name("evidence")).read_text())
    gaps = pd.read_parquet(out / schema.HOST_IDLE_GAPS)
    events = pd.read_parquet(out / schema.NORMALIZED_EVENTS, columns=["rank_id", "row_idx", "start_ns"])
    starts = events.assign(rank_id=events["rank_id"].astype(int)).set_index(["rank_id", "row_idx"])["start_ns"]
    checked = 0
    for rank, entry in manifest["host_trace"]["by_rank"].items():
        assert entry["status"] == "ok"
        (trace,) = Path(root).glob(f"*{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json") or [None]
        launches = raw_launches(trace)
        steps = pd.read_parquet(out / schema.STEP_SEGMENTS, filters=[("rank_id", "=", int(rank))])
        first, last = Decimal(int(steps["start_ns"].min())) / 1000, Decimal(int(steps["end_ns"].max())) / 1000
        assert entry["launch_flows"] == sum(first <= device <= last for device in launches)  # kernels in its steps
        mine = gaps[gaps["rank_id"].astype(int) == int(rank)]
        for gap in mine[mine["copy_us"] == 0].itertuples():  # the host's gaps (a copy's are kept for it)
            kernel_us = Decimal(int(starts.loc[(int(rank), gap.after_row)])) / 1000
            launch = next((v for k, v in launches.items() if abs(k - kernel_us) <= 1), None)
            if launch is None:
                assert np.isnan(gap.launch_lead_us) and gap.cause in HOST_CAUSED
            else:
                # a float64 of epoch µs (how the trace is parsed) holds a quarter of a µs
                assert gap.launch_lead_us == pytest.approx(float(Decimal(int(gap.start_ns)) / 1000 - launch), abs=0.5)
                assert gap.launch_lead_us < 0  # stored gaps are the host's: launched after the gap began
            checked += 1
    assert checked > 0


def raw_cann_calls(trace: Path, steps: pd.DataFrame) -> pd.DataFrame:
    """CANN lane X events of the raw trace starting inside a step: per name, count and total µs."""
    spans = [(Decimal(int(a)) / 1000, Decimal(int(b)) / 1000) for a, b in zip(steps["start_ns"], steps["end_ns"])]
    events = json.loads(trace.read_text())
    cann = {
        e["pid"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name" and e["args"].get("name") == "CANN"
    }
    rows = [
        (e["name"], float(e["dur"]))
        for e in events
        if e.get("ph") == "X" and e.get("pid") in cann and any(a <= Decimal(str(e["ts"])) < b for a, b in spans)
    ]
    frame = pd.DataFrame(rows, columns=["name", "dur"])
    return frame.groupby("name")["dur"].agg(["size", "sum"])


@pytest.mark.parametrize("name", ["text_level1"])
def test_cann_api_sums_on_a_real_trace_are_the_raw_calls(tmp_path, name):
    root, _ = SAMPLE_ROOTS[name]
    out = tmp_path / "out"
    analyze(root, out, jobs=1, stage_range=StageRange(to_stage="evidence"))
    summary = pd.read_csv(out / schema.HOST_API_SUMMARY_CSV.file)
    for rank, mine in summary[summary["layer"] == "cann"].groupby("rank_id"):
        steps = pd.read_parquet(out / schema.STEP_SEGMENTS, filters=[("rank_id", "=", int(rank))])
        (trace,) = Path(root).glob(f"*{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json")
        raw = raw_cann_calls(trace, steps)
        ours = mine.groupby("name").agg(size=("count", "sum"), total=("total_us", "sum"))
        assert set(ours.index) == set(raw.index)
        assert (ours["size"] == raw["size"].reindex(ours.index)).all()
        assert np.allclose(ours["total"], raw["sum"].reindex(ours.index), rtol=1e-6)
        # the host's compile activity is CANN's operator compiles in the step (the real capture compiles
        # 19 operators it had cached: tens of µs each)
        activity = summary[(summary["layer"] == "activity") & (summary["name"] == "compile")]
        compiled = activity[activity["rank_id"] == rank]["total_us"].sum()
        assert compiled == pytest.approx(raw.loc["AscendCL@opCompile", "sum"], abs=0.5) and compiled > 0  # µs, rounded
