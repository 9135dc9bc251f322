"""summarize: operators, communication and time accounting add up, and show the planted faults."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import SAMPLE_ROOTS

from npuprof import knowledge
from npuprof.pipeline import schema
from npuprof.pipeline.runner import StageRange, analyze
from npuprof.synth import SCENARIOS

pytestmark = pytest.mark.xdist_group("planted")  # one worker: shares its fixtures

SCENARIO_NAMES = sorted(SCENARIOS)
# synth's pipeline profiles (synth/kernels.py PROFILES) and the bound family each must get
PROFILE_FAMILY = {"cube": "cube", "cube_mte2": "aic_mte", "vector": "vector", "vector_mte": "aiv_mte"}
KERNEL_PROFILE = {"MatMulV3": "cube", "SwiGlu": "vector", "Add": "vector_mte", "RotaryPositionEmbedding": "vector_mte"}

# what summarize wrote before evidence and model were stages of their own (and before cross_rank took the
# HCCL tables), and classify's class summaries
SUMMARY_VIEWS = (
    *schema.SUMMARY_CSVS,
    *schema.COLLECTIVE_CSVS,
    *schema.CLASS_SUMMARY_CSVS,
    schema.EVIDENCE_INDEX_CSV,
    schema.OPERATOR_SHAPES_CSV,
    *schema.EFFICIENCY_CSVS,
)


@pytest.fixture(scope="module")
def analyzed(planted_outputs) -> dict[str, tuple[Path, Path]]:
    return planted_outputs


def read(out: Path, view: schema.CsvView) -> pd.DataFrame:
    return pd.read_csv(out / view.file)


def assert_accounting_adds_up(out: Path) -> None:
    accounting = read(out, schema.STEP_TIME_ACCOUNTING_CSV)
    steps = read(out, schema.STEP_SUMMARY).set_index(["rank_id", "step_ordinal"])
    primary = accounting[accounting["breakdown"] == "primary"]
    total = primary.groupby(["rank_id", "step_ordinal"])["ms"].sum()
    assert len(total) == len(steps), "every step is accounted for"
    wall = steps["wall_ms"].reindex(total.index)
    assert ((total - wall).abs() < 1e-3).all(), (total - wall).abs().max()  # within 1 µs
    splits = (
        ("comm_by_role", "communication"),
        ("comm_by_role_kind", "communication"),
        ("compute_by_op_type", "compute"),
        ("compute_by_block", "compute"),
        ("comm_exposed_parts", "communication"),
    )
    for breakdown, category in splits:
        again = accounting[accounting["breakdown"] == breakdown].groupby(["rank_id", "step_ordinal"])["ms"].sum()
        part = primary[primary["category"] == category].groupby(["rank_id", "step_ordinal"])["ms"].sum()
        pd.testing.assert_series_equal(again, part.reindex(again.index), check_names=False, atol=1e-6)


def assert_operators_add_up(out: Path) -> None:
    events = pd.read_parquet(out / schema.NORMALIZED_EVENTS, columns=["rank_id", "duration_ns", "op_type"])
    operators = read(out, schema.OPERATOR_SUMMARY_CSV)
    per_rank = operators.groupby("rank_id").agg(calls=("call_count", "sum"), us=("duration_sum_us", "sum"))
    truth = events.groupby("rank_id", observed=True).agg(calls=("duration_ns", "size"), us=("duration_ns", "sum"))
    truth = truth[truth["calls"] > 0]
    assert (per_rank["calls"] == truth["calls"].reindex(per_rank.index)).all()
    assert ((per_rank["us"] - truth["us"].reindex(per_rank.index) / 1000).abs() < 1e-3).all()
    classes = read(out, schema.OPERATOR_CLASS_SUMMARY_CSV)
    assert classes["call_count"].sum() == len(events)
    comm = events[events["op_type"].isin(["communication", "mix_comm_aiv"])]
    hccl = read(out, schema.HCCL_OP_SUMMARY_CSV)
    assert hccl["call_count"].sum() == len(comm)
    assert abs(hccl["duration_sum_us"].sum() - comm["duration_ns"].sum() / 1000) < 1e-3


@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_every_table_adds_up_on_every_scenario(analyzed, name):
    _, out = analyzed[name]
    assert_accounting_adds_up(out)
    assert_operators_add_up(out)
    ranks = read(out, schema.RANK_SUMMARY_CSV)
    truth = json.loads((analyzed[name][0] / "ground_truth.json").read_text())
    assert sorted(ranks["rank_id"]) == sorted(int(r) for r in truth["ranks"])


@pytest.mark.parametrize("name", sorted(SAMPLE_ROOTS))
def test_every_table_adds_up_on_every_real_sample(sample_outputs, name):
    out, _ = sample_outputs[name]
    for view in SUMMARY_VIEWS:
        assert (out / view.file).exists(), view.file
    manifest = json.loads((out / "summary_manifest.json").read_text())  # the name is the contract
    assert manifest["event_count"] == len(pd.read_parquet(out / schema.NORMALIZED_EVENTS, columns=["rank_id"]))
    assert_operators_add_up(out)
    if len(read(out, schema.STEP_SUMMARY)):
        assert_accounting_adds_up(out)


def test_bound_families_are_the_planted_pipeline_profiles(analyzed):
    _, out = analyzed["clean"]
    operators = read(out, schema.OPERATOR_CLASS_SUMMARY_CSV)
    for kernel_type, profile in KERNEL_PROFILE.items():
        families = set(operators.loc[operators["type"] == kernel_type, "bound_family"])
        assert families == {PROFILE_FAMILY[profile]}, (kernel_type, families)
    comm = operators[operators["op_type"] == "communication"]
    assert (comm["bound_family"] == "communication").all()


def test_the_planted_slow_rank_waits_least_in_every_all_reduce(analyzed):
    root, out = analyzed["slow_rank"]
    truth = json.loads((root / "ground_truth.json").read_text())
    slow = next(f["ranks"] for f in truth["faults"] if f["kind"] == "slow_rank_suspected")
    classes = read(out, schema.HCCL_CLASS_SUMMARY_CSV)
    allreduce = classes[classes["kind"] == "allreduce"].iloc[0]
    assert [int(allreduce["min_avg_rank"])] == slow  # it arrives last, so its all-reduces are shortest
    assert allreduce["rank_skew_ratio"] > 0.5
    clean = read(analyzed["clean"][1], schema.HCCL_CLASS_SUMMARY_CSV)
    assert clean[clean["kind"] == "allreduce"]["rank_skew_ratio"].iloc[0] < 0.2 * allreduce["rank_skew_ratio"]


def test_communication_roles_come_from_the_parallel_groups(analyzed):
    _, out = analyzed["pipeline_parallel"]
    hccl = read(out, schema.HCCL_OP_SUMMARY_CSV)
    assert set(hccl.loc[hccl["kind"] == "send_recv", "parallel_role"]) == {"PP"}
    assert "unknown" not in set(hccl["parallel_role"])
    _, out = analyzed["mixed"]
    roles = set(read(out, schema.HCCL_OP_SUMMARY_CSV)["parallel_role"])
    assert "unknown" not in roles and len(roles) >= 2


def test_the_planted_host_bubble_is_internal_idle_on_its_steps(analyzed):
    root, out = analyzed["host_bubble"]
    truth = json.loads((root / "ground_truth.json").read_text())
    fault = next(f for f in truth["faults"] if f["kind"] == "device_idle_bubble")
    accounting = read(out, schema.STEP_TIME_ACCOUNTING_CSV)
    idle = accounting[(accounting["category"] == "idle") & (accounting["component"] == "internal")]
    bubbles = idle.groupby(["rank_id", "step_id"])["ms"].sum()
    planted_ms = fault["gap_us"] / 1000
    for rank in fault["ranks"]:
        for step in fault["step_ids"]:
            assert bubbles[(rank, step)] >= planted_ms
    others = bubbles.drop([(r, s) for r in fault["ranks"] for s in fault["step_ids"]])
    assert others.max() < 0.2 * planted_ms
    ranks = read(out, schema.RANK_SUMMARY_CSV).set_index("rank_id")
    assert ranks.loc[fault["ranks"][0], "bubbling_step_count"] >= len(fault["step_ids"])


def test_the_analysis_facade_returns_the_summaries(analyzed):
    from npuprof.api import Analysis

    _, out = analyzed["mixed"]
    analysis = Analysis(out)
    assert analysis.operators()["call_count"].sum() == analysis.operators(merged=True)["call_count"].sum()
    assert set(analysis.communication(merged=True)["kind"]) <= set(analysis.communication()["kind"])
    primary = analysis.time_accounting().query("breakdown == 'primary'")
    assert (
        {"compute", "communication", "idle"}
        <= set(primary["category"])
        <= {"compute", "communication", "overlap", "idle"}
    )
    assert list(analysis.ranks()["rank_id"]) == sorted(analysis.ranks()["rank_id"])


def test_the_service_order_of_units_gives_the_local_tables(analyzed, tmp_path):
    """The service runs every rank's map units before any reduce: a map unit must not read what a
    reduce writes (capture_info.json, source_index.json)."""
    from npuprof.pipeline.execution import run_rank_chain
    from npuprof.pipeline.runner import finish_root
    from npuprof.pipeline.sources.discovery import discover
    from npuprof.pipeline.stages import STAGE_NAMES

    root, local = analyzed["mixed"]
    inputs = discover(root)
    stages = list(STAGE_NAMES)
    rank_results = [run_rank_chain(str(tmp_path), vars(rank), {}, stages) for rank in inputs.ranks]
    finish_root(str(tmp_path), inputs.to_dict(), {}, stages, rank_results)
    for view in SUMMARY_VIEWS:
        pd.testing.assert_frame_equal(read(tmp_path, view), read(local, view), obj=view.file)


def test_communication_files_split_each_op_and_name_its_group(tmp_path):
    from conftest import QWEN_TRAINING

    analyze(QWEN_TRAINING, tmp_path / "out", jobs=1, stage_range=StageRange(to_stage="cross_rank"))
    ops = read(tmp_path / "out", schema.COMMUNICATION_SUMMARY_CSV)
    assert set(ops["rank_id"]) == {0, 1, 2, 3}  # ranks 1 and 3 hold only communication files
    assert (ops["source"] == "communication_json").all()
    split = ops["transit_ms"] + ops["wait_ms"] + ops["idle_ms"]
    assert ((split - ops["elapse_ms"]).abs() < 1e-6).all()  # every op's time adds up
    metadata = json.loads((QWEN_TRAINING / "rank_0_ascend_pt" / "profiler_metadata.json").read_text())
    from npuprof.pipeline.sources.group_hash import double_hash

    named = {str(double_hash(key)): group["group_name"] for key, group in metadata["parallel_group_info"].items()}
    mine = ops[ops["rank_id"] == 0]
    assert set(mine["group_hash"].astype(str)) <= set(named)
    assert (mine["parallel_role"] != "unknown").all()
    links = read(tmp_path / "out", schema.COMMUNICATION_LINKS_CSV)
    assert {"LOCAL", "HCCS"} <= set(links["transport"]) and (links["bandwidth_gbps"] >= 0).all()
    # TP1 PP2 DP2: Megatron's mp group (ranks 0, 2) is model parallel, not tensor parallel; TP groups
    # of a TP1 job hold one rank each
    mp_hash = next(h for h, name in named.items() if name == "mp")
    assert set(mine[mine["group_hash"].astype(str) == mp_hash]["parallel_role"]) == {"MP"}
    hccl = read(tmp_path / "out", schema.HCCL_CLASS_SUMMARY_CSV)
    assert (hccl[hccl["parallel_role"] == "TP"]["rank_count"] == 1).all()
    mp = hccl[hccl["parallel_role"] == "MP"]
    assert list(mp["kind"]) == ["allreduce"] and list(mp["rank_count"]) == [2]


def test_a_role_that_disagrees_with_the_parallel_sizes_is_unknown():
    from npuprof.pipeline.summaries.communication import role_by_group_hash

    groups = {
        "g_tp": {"group_name": "tp", "global_ranks": [0, 1]},  # two members, but the job is TP1
        "g_dp": {"group_name": "dp", "global_ranks": [0, 1]},
        "g_mp": {"group_name": "mp", "global_ranks": [0, 2]},
    }
    sizes = {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 2, "data_parallel_size": 2}
    roles = set(role_by_group_hash(groups, sizes).values())
    assert roles == {"unknown", "DP", "MP"}
    assert set(role_by_group_hash(groups, None).values()) == {"TP", "DP", "MP"}  # no sizes: the names stand


def test_the_planted_slow_link_has_a_quarter_of_the_bandwidth(analyzed):
    root, out = analyzed["slow_link"]
    fault = next(
        f for f in json.loads((root / "ground_truth.json").read_text())["faults"] if f["kind"] == "slow_link_suspected"
    )
    links = read(out, schema.COMMUNICATION_LINKS_CSV)
    remote = links[(links["transport"] != "LOCAL") & (links["tier"] != "total")]
    pair = remote.apply(lambda r: sorted((r["src_local_rank"], r["dst_local_rank"])) == sorted(fault["link"]), axis=1)
    ratio = remote.loc[~pair, "bandwidth_gbps"].median() / remote.loc[pair, "bandwidth_gbps"].median()
    assert abs(ratio - fault["factor"]) / fault["factor"] < 0.1, ratio


def test_without_communication_files_the_ops_come_from_the_events(tmp_path):
    from conftest import PYTORCH_DATA, copy_sample

    root = copy_sample(PYTORCH_DATA / "text" / "level1", tmp_path / "root")
    for path in root.rglob("communication*.json"):
        path.unlink()
    result = analyze(root, tmp_path / "out", jobs=1, stage_range=StageRange(to_stage="cross_rank"))
    ops = read(tmp_path / "out", schema.COMMUNICATION_SUMMARY_CSV)
    events = pd.read_parquet(tmp_path / "out" / schema.NORMALIZED_EVENTS, columns=["op_type"])
    assert len(ops) == events["op_type"].isin(["communication", "mix_comm_aiv"]).sum()
    assert (ops["source"] == "events").all() and ops["transit_ms"].isna().all()
    if len(ops):
        assert any("no communication.json" in text for text in result["summarize"]["limitations"])


def test_every_bubble_window_resolves_to_its_rows_and_kernels(analyzed):
    root, out = analyzed["host_bubble"]
    fault = next(
        f for f in json.loads((root / "ground_truth.json").read_text())["faults"] if f["kind"] == "device_idle_bubble"
    )
    index = read(out, schema.EVIDENCE_INDEX_CSV).set_index("evidence_id")
    windows = [json.loads(line) for line in (out / schema.BUBBLE_WINDOWS_JSONL).read_text().splitlines()]
    assert windows and index.index.is_unique
    events = pd.read_parquet(
        out / schema.NORMALIZED_EVENTS, columns=["rank_id", "row_idx", "start_ns", "end_ns", "name"]
    )
    by_row = events.set_index(["rank_id", "row_idx"])
    step_starts = read(out, schema.STEP_SUMMARY).set_index(["rank_id", "step_id"])["start_us"]
    head = knowledge.load("summary_rules")["idle_before_first_event"]
    for window in windows:
        entry = index.loc[window["evidence_id"]]  # every id resolves
        assert entry["kind"] == "bubble_window" and Path(entry["source_path"]).is_file()
        before = by_row.loc[(window["rank_id"], window["before_event"]["row_idx"])]
        after = by_row.loc[(window["rank_id"], window["after_event"]["row_idx"])]
        if window["kind"] == head:  # from where the profiler started the step; the kernel before ran earlier
            assert step_starts[(window["rank_id"], window["step_id"])] == pytest.approx(window["start_us"], abs=1e-3)
            first = window["before_event"]["row_idx"] == window["after_event"]["row_idx"]  # the rank's first
            assert first or before["end_ns"] / 1000 <= window["start_us"] + 1e-3
        else:
            assert before["end_ns"] / 1000 == pytest.approx(window["start_us"], abs=1e-3)  # the kernel that went idle
        assert after["start_ns"] / 1000 == pytest.approx(window["end_us"], abs=1e-3)  # the one that resumed
        assert window["duration_us"] >= 50
        attribution = window["soft_attribution"]  # candidates from the host trace (every synth rank has one)
        assert attribution is None or attribution["soft_root_cause_labels"]
    planted = [
        w
        for w in windows
        if w["rank_id"] in fault["ranks"] and w["step_id"] in fault["step_ids"] and w["kind"] == "internal"
    ]
    assert sorted({w["step_id"] for w in planted if w["duration_us"] >= fault["gap_us"]}) == fault["step_ids"]
    steps = index[index["kind"] == "step_window"]
    assert len(steps) == len(read(out, schema.STEP_SUMMARY))


@pytest.mark.parametrize("name", ["clean", "ep_imbalance", "mixed", "pipeline_parallel"])
def test_class_summaries_cover_every_member(analyzed, name):
    _, out = analyzed[name]
    blocks, layers = read(out, schema.BLOCK_SUMMARY), read(out, schema.LAYER_SUMMARY)
    steps = read(out, schema.STEP_SUMMARY)
    block_classes = read(out, schema.BLOCK_CLASS_SUMMARY_CSV)
    assert block_classes["member_count"].sum() == len(blocks)
    assert block_classes["wall_ms_sum"].sum() == pytest.approx(blocks["wall_ms"].sum())
    assert block_classes["top_ops"].notna().all() and (block_classes["comm_share_mean"].between(0, 1)).all()
    layer_classes = read(out, schema.LAYER_CLASS_SUMMARY_CSV)
    assert layer_classes["member_count"].sum() == len(layers)
    for shares in layer_classes["block_kind_wall_share_mean"]:
        total = sum(float(item.split("=")[1]) for item in shares.split(";"))
        assert 0.9 <= total <= 1.05, shares  # the blocks partition the layer (gaps between them aside)
    step_classes = read(out, schema.STEP_CLASS_SUMMARY_CSV)
    assert step_classes["member_count"].sum() == len(steps)
    assert (step_classes["main_ms_mean"] <= step_classes["wall_ms_mean"] + 1e-9).all()


def test_the_moe_block_names_its_expert_kernels(analyzed):
    _, out = analyzed["ep_imbalance"]
    block_classes = read(out, schema.BLOCK_CLASS_SUMMARY_CSV)
    moe = block_classes[block_classes["block_kind"] == "moe"]
    assert len(moe) and moe["top_ops"].str.contains("GroupedMatmul").all()
    assert (moe["comm_ms_mean"] > 0).all()  # dispatch / combine run inside the MoE block


def test_group_hash_matches_the_spec_value():
    from npuprof.pipeline.sources.group_hash import double_hash

    assert double_hash("group_name_5") == 5862276114690318097  # input-formats §2.3, checked on real samples


def test_each_collective_knows_the_layer_and_block_it_ran_in(analyzed):
    _, out = analyzed["ep_imbalance"]
    comm = pd.read_parquet(out / schema.COMMUNICATION_EVENTS)
    expert = comm[comm["kind"].isin(["moe_dispatch", "moe_combine"])]
    assert len(expert) and (expert["block_kind"] == "moe").all() and expert["layer_ordinal"].notna().all()
    blocks = pd.read_parquet(out / schema.BLOCK_SEGMENTS)
    located = expert.merge(blocks, on=["rank_id", "step_ordinal", "layer_ordinal", "block_class_id"], how="left")
    inside = (located["start_ns_x"] >= located["start_ns_y"]) & (located["end_ns_x"] <= located["end_ns_y"])
    assert inside.groupby([located["rank_id"], located["row_idx"]]).any().all()  # within its block's window


def test_hccl_calls_are_ranked_per_kind_and_group_never_one_call_at_a_time(analyzed):
    """Every HCCL call has its own name (hcom_allReduce__503_43_1): the class summaries merge them
    into call families (hcom_allReduce__503_*), checked against the raw kernel_details.csv files."""
    root, out = analyzed["clean_inference"]  # TP all-reduces inside every block
    raw = pd.concat(pd.read_csv(path) for path in sorted(root.rglob("kernel_details.csv")))
    raw_comm = raw[raw["Name"].str.startswith("hcom_")]
    expected = raw_comm.groupby(raw_comm["Name"].str.replace(r"_\d+_\d+$", "_*", regex=True))["Duration(us)"].sum()
    assert raw_comm["Name"].nunique() > 10 * len(expected)  # many calls, few families
    classes = read(out, schema.OPERATOR_CLASS_SUMMARY_CSV)
    comm = classes[classes["op_type"] == "communication"].set_index("name")["duration_sum_us"]
    assert comm.reindex(expected.index).to_numpy() == pytest.approx(expected.to_numpy())
    assert len(comm) == len(expected)
    per_rank = read(out, schema.OPERATOR_SUMMARY_CSV)  # per call where the call is the point
    assert per_rank[per_rank["op_type"] == "communication"]["name"].nunique() == raw_comm["Name"].nunique()
    blocks = read(out, schema.BLOCK_CLASS_SUMMARY_CSV)
    with_comm = blocks[blocks["comm_ms_mean"] > 0]
    assert len(with_comm) and not blocks["top_ops"].str.contains(r"hcom_\w+__\d{3}_\d+_\d+=").any()
    for row in with_comm.itertuples():  # one family per block: its share of top_ops is the block's comm
        family = [item for item in row.top_ops.split(";") if item.startswith("hcom_")]
        assert len(family) == 1 and float(family[0].split("=")[1]) == pytest.approx(row.comm_ms_mean, abs=1e-3)


def test_a_rank_chain_reads_what_its_stages_declare_and_nothing_back_from_disk(analyzed, tmp_path, monkeypatch):
    """Each map unit reads only the tables (and event columns) its stage declares in ``map_reads``,
    all handed over in memory: the chain keeps just those, so a read outside them would go to disk."""
    from npuprof.pipeline import execution, io
    from npuprof.pipeline.sources.discovery import discover
    from npuprof.pipeline.stages import STAGES, stage
    from npuprof.pipeline.stages.base import RankContext

    current, reads, from_disk = [""], [], []
    run_stage, read_table, read_dataset = execution.run_rank_stage, RankContext.read_table, io.read_dataset

    def in_stage(name, *args):
        current[0] = name
        return run_stage(name, *args)

    def recorded(self, table, columns=None, filter=None):
        reads.append((current[0], table.path, columns))
        return read_table(self, table, columns, filter)

    monkeypatch.setattr(execution, "run_rank_stage", in_stage)
    monkeypatch.setattr(RankContext, "read_table", recorded)
    monkeypatch.setattr(io, "read_dataset", lambda *a, **k: from_disk.append(a[1].path) or read_dataset(*a, **k))
    root, _ = analyzed["mixed"]
    rank = max(discover(root).ranks, key=lambda r: r.rank_id)
    mapped = [s.name for s in STAGES if s.map_rank is not None]
    execution.run_rank_chain(str(tmp_path), vars(rank), {}, mapped)
    assert {name for name, _, _ in reads} == set(mapped[1:]) and from_disk == []
    for name, path, columns in reads:
        declared = {read.table.path: read.columns for read in stage(name).map_reads}
        assert path in declared, f"{name} reads {path} without declaring it"
        if declared[path] is not None:
            assert columns is not None and set(columns) <= set(declared[path]), f"{name} reads {path} {columns}"


def test_a_rank_chain_featurises_its_events_once(analyzed, tmp_path, monkeypatch):
    """Segment's event features are classify's in a chain (computed once, dropped after classify);
    classify run alone from disk computes its own, and writes the same tables."""
    from table_digest import table_digests

    from npuprof.pipeline import execution
    from npuprof.pipeline.runner import StageRange, analyze
    from npuprof.pipeline.segmentation import features
    from npuprof.pipeline.sources.discovery import discover
    from npuprof.pipeline.stages import STAGES

    calls, featurise = [], features.event_features
    monkeypatch.setattr(features, "event_features", lambda events: calls.append(events.num_rows) or featurise(events))
    root, _ = analyzed["mixed"]
    rank = max(discover(root).ranks, key=lambda r: r.rank_id)
    execution.run_rank_chain(str(tmp_path / "chain"), vars(rank), {}, [s.name for s in STAGES if s.map_rank])
    assert len(calls) == 1
    calls.clear()
    analyze(root, tmp_path / "alone", jobs=1, stage_range=StageRange(to_stage="segment"))
    analyze(None, tmp_path / "alone", jobs=1, stage_range=StageRange(only_stage="classify"))
    assert len(calls) == 2 * len(discover(root).ranks)  # segment's, then classify's own: no chain between
    chained = table_digests(tmp_path / "chain", ("classify",))
    assert chained and chained.items() <= table_digests(tmp_path / "alone", ("classify",)).items()


def exposed_parts(ops: list[tuple[int, int, float, float]], compute_end: int = 100) -> dict[str, float]:
    """comm_exposed_parts (µs) of one step: a compute kernel over [0, compute_end) µs and DP all-reduces
    (start, end in µs, transit share, wait share)."""
    from npuprof.pipeline.summaries.accounting import step_time_accounting

    events = pd.DataFrame(
        {
            "step_ordinal": [0.0] * (len(ops) + 1),
            "start_ns": [0, *(o[0] * 1000 for o in ops)],
            "end_ns": [compute_end * 1000, *(o[1] * 1000 for o in ops)],
            "is_comm": [False, *([True] * len(ops))],
            "bound_family": ["cube", *([None] * len(ops))],
            "kind": [None, *(["allreduce"] * len(ops))],
            "parallel_role": [None, *(["DP"] * len(ops))],
            "op_type": ["aic", *(["communication"] * len(ops))],
        }
    )
    steps = pd.DataFrame(
        {"step_ordinal": [0], "step_id": [1], "complete": [True], "start_ns": [0], "end_ns": [300_000]}
    )
    spans = pd.DataFrame({"step_ordinal": [0], "main_start_ns": [0], "main_end_ns": [300_000]})
    parts = pd.DataFrame(
        {
            "transfer": [0.0, *(o[2] for o in ops)],
            "wait": [0.0, *(o[3] for o in ops)],
            "idle": [0.0, *(1 - o[2] - o[3] for o in ops)],
            "unsplit": [0.0] * (len(ops) + 1),
        }
    )
    table = step_time_accounting(events, steps, spans, parts)
    rows = table[table["breakdown"] == "comm_exposed_parts"]
    return {str(c): round(float(ms) * 1e3, 6) for c, ms in zip(rows["component"], rows["ms"])}


def test_an_ops_exposed_tail_is_its_transit_and_its_head_the_wait():
    # the all-reduce runs 50-150 µs, waits its first 60 and moves data its last 40; compute hides 50-100
    assert exposed_parts([(50, 150, 0.4, 0.6)]) == {"DP allreduce transfer": 40.0, "DP allreduce wait": 10.0}


def test_an_op_queued_behind_a_waiting_op_hands_its_late_transfer_to_that_wait():
    # the rank computes until 170 µs; its first all-reduce (50-150) waits 60 µs for its peers, hidden;
    # the second, queued behind it on the communication stream while the compute runs, ran 60 µs late:
    # its 30 exposed µs of transit would have run under the compute had the peers been on time
    assert exposed_parts([(50, 150, 0.4, 0.6), (150, 200, 1.0, 0.0)], compute_end=170) == {"DP allreduce wait": 30.0}
    # ... and so does the rest of that stream's queue once the compute has ended: the second hands back
    # 50 µs, the third the 10 left of the 60 µs the first waited
    parts = exposed_parts([(50, 150, 0.4, 0.6), (150, 200, 1.0, 0.0), (200, 250, 1.0, 0.0)])
    assert parts == {"DP allreduce transfer": 80.0, "DP allreduce wait": 70.0}
    # ... not so ops the compute stream issued one after another once its compute ended (none runs
    # beside compute): each one's transit is its own, as it is for one that starts well after the first ends
    parts = exposed_parts([(50, 150, 0.4, 0.6), (150, 200, 1.0, 0.0)], compute_end=50)
    assert parts == {"DP allreduce transfer": 90.0, "DP allreduce wait": 60.0}
    parts = exposed_parts([(50, 150, 0.4, 0.6), (200, 250, 1.0, 0.0)], compute_end=180)
    assert parts == {"DP allreduce transfer": 50.0}


@pytest.mark.parametrize("name", ["pipeline_parallel", "qwen3_training"])
def test_a_pipeline_stages_compute_is_the_vendors_computing(planted_outputs, sample_outputs, name):
    """pp_schedule.csv's compute_ms, which weighs one stage against another, is each rank's compute kernels'
    busy time, communication beside them or not: step_trace_time.csv's Computing for that rank and step.
    On pipeline_parallel gradient buckets all-reduce under the backward (compute beside communication,
    which the stage still computes); Qwen3 runs its sync after the backward."""
    out = planted_outputs[name][1] if name in planted_outputs else sample_outputs[name][0]
    schedule = read(out, schema.PP_SCHEDULE_CSV)
    ranks = json.loads((out / "source_index.json").read_text())["inputs"]["ranks"]
    for rank in ranks:
        if rank["rank_id"] not in set(schedule["rank_id"]):
            continue
        trace = pd.read_csv(Path(rank["rank_dir"]) / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv")
        mine = schedule[schedule["rank_id"] == rank["rank_id"]].set_index("step_id")["compute_ms"]
        vendor = trace.set_index("Step")["Computing"].reindex(mine.index) / 1000.0
        assert mine.to_numpy() == pytest.approx(vendor.to_numpy(), abs=0.005), rank["rank_id"]
