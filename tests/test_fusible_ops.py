"""fusible_op_sequence: a memory-bound chain of vector kernels, each reading what the one before wrote,
is found where it recurs, priced from the traffic one fused kernel would still move, and told apart from
what is not a chain: a break by another task, a kernel that does not read its predecessor's result, one
kernel repeated, a compute-bound kernel, a chain a named composite already covers."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from npuprof import knowledge
from npuprof.pipeline import schema
from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.detectors.fusible_ops import (
    FINDING,
    SequenceWindows,
    _cumulative,
    _per_kernel,
    _windows_of_length,
    chosen_chains,
    fusible_op_sequence,
)
from npuprof.pipeline.stages.diagnostics.kernel_traffic import reads_previous_output
from npuprof.pipeline.stages.diagnostics.rank_kernels import in_start_order

pytestmark = pytest.mark.xdist_group("planted")  # shares planted_outputs

RULES = knowledge.load("diagnosis_rules")["findings"][FINDING]
STAGES = knowledge.load("summary_rules")["bound"]["stages"]
X = "64,128"  # a (t, h) bf16 tensor: 16 KiB


def _kernel(kind: str, start_us: float, us: float, inputs: str = X, dtypes: str = "DT_BF16", **kw) -> dict:
    """One task as normalized_events holds it; ``memory`` kernels spend 90 % of their pipe time in MTE2 /
    MTE3, ``vector`` ones 70 % in the vector unit."""
    pipes = {"memory": (0.1, 0.6, 0.3), "vector": (0.7, 0.2, 0.1)}.get(kw.pop("bound", "memory"))
    row = {
        "name": f"aclnn{kind}",
        "type": kind,
        "op_type": kw.pop("op_type", "aiv"),
        "start_ns": int(start_us * 1000),
        "end_ns": int((start_us + us) * 1000),
        "input_shapes": inputs,
        "input_dtypes": dtypes,
        "output_shapes": kw.pop("output", X),
        "output_dtypes": "DT_BF16",
        **{stage: None for stage in STAGES},
    }
    if pipes:
        row.update(aiv_vec_time_us=pipes[0] * us, aiv_mte2_time_us=pipes[1] * us, aiv_mte3_time_us=pipes[2] * us)
    return row


def _chains(rows: list[dict], length: int) -> pd.DataFrame:
    kernels = _per_kernel(pd.DataFrame(rows), STAGES, RULES["memory_families"])
    return _windows_of_length(kernels, length, _cumulative(kernels))


def test_a_chain_is_priced_by_the_traffic_one_fused_kernel_still_moves():
    """muls reads and writes x (2 units), add reads it and the residual and writes the sum (3), muls reads
    and writes it (2): 7 units moved; fused, x and the residual are read and the result written: 3 units,
    3/7 of the kernels' time. The two gaps close too."""
    rows = [
        _kernel("Muls", 0, 20),
        _kernel("Add", 22, 30, f"{X};{X}", "DT_BF16;DT_BF16"),
        _kernel("Muls", 54, 20),
    ]
    (chain,) = _chains(rows, 3).to_dict("records")
    assert chain["kernels"] == "Muls → Add → Muls" and chain["span_us"] == pytest.approx(74.0)
    assert chain["kernel_us"] == pytest.approx(70.0) and chain["fused_us"] == pytest.approx(70.0 * 3 / 7)
    assert chain["mte_us"] / chain["pipe_us"] == pytest.approx(0.9)


def test_texts_read_as_categoricals_give_the_same_chains_and_a_missing_type_shows_the_name():
    """The scan reads the texts dictionary-encoded (categoricals): the chains are those of the text columns,
    and a kernel the capture gives no type is labelled by its name, as with text columns."""
    rows = [_kernel("Muls", 0, 20), _kernel("Add", 22, 30, f"{X};{X}", "DT_BF16;DT_BF16"), _kernel("Muls", 54, 20)]
    rows[1]["type"] = None
    texts = pd.DataFrame(rows)
    coded = texts.astype(
        {
            c: "category"
            for c in ["name", "type", "op_type", "input_shapes", "input_dtypes", "output_shapes", "output_dtypes"]
        }
    )
    chains = [
        _windows_of_length(k, 3, _cumulative(k))
        for k in (_per_kernel(frame, STAGES, RULES["memory_families"]) for frame in (texts, coded))
    ]
    assert chains[0]["kernels"].tolist() == ["Muls → aclnnAdd → Muls"]
    pd.testing.assert_frame_equal(chains[0], chains[1])


def test_what_is_not_a_chain_is_not_taken_for_one():
    linked = [_kernel("Muls", 0, 20), _kernel("Cast", 21, 20)]
    assert len(_chains(linked, 2)) == 1
    broken = [_kernel("Muls", 0, 20), _kernel("allReduce", 21, 5, op_type="communication", bound=None), *linked[1:]]
    assert _chains(broken, 2).empty and _chains(broken, 3).empty
    other_tensor = [linked[0], _kernel("Cast", 21, 20, inputs="64,256")]  # reads something else
    other_dtype = [linked[0], _kernel("Cast", 21, 20, dtypes="FLOAT")]
    repeated = [_kernel("Muls", 0, 20), _kernel("Muls", 21, 20)]  # one kernel over many tensors: a batch
    computing = [linked[0], _kernel("Cast", 21, 20, bound="vector")]
    for rows in (other_tensor, other_dtype, repeated, computing):
        assert _chains(rows, 2).empty, rows
    assert reads_previous_output(pd.DataFrame(linked)).tolist() == [False, True]


def test_a_capture_without_pipe_times_is_not_judged():
    rows = [_kernel("Muls", 0, 20, bound=None), _kernel("Cast", 21, 20, bound=None)]
    assert _per_kernel(pd.DataFrame(rows), STAGES, RULES["memory_families"]) is None
    context = DiagnosisContext.from_frames({"sequence_windows": SequenceWindows(pd.DataFrame(), [1, 3])})
    assert fusible_op_sequence(context) == []
    assert "ranks 1, 3" in context.not_judged[FINDING] and "PipeUtilization" in context.not_judged[FINDING]


def test_the_longest_saving_chain_is_taken_and_its_parts_leave_the_rest():
    """Ten layers of muls → add → muls: the three-kernel chain saves more than either pair inside it, so
    it is taken once per layer and the pairs are not counted again; a span covered by a named composite
    (unfused_op_pattern's) is left out."""
    rows = []
    for layer in range(10):
        at = layer * 200.0
        rows += [
            _kernel("Muls", at, 20),
            _kernel("Add", at + 22, 30, f"{X};{X}", "DT_BF16;DT_BF16"),
            _kernel("Muls", at + 54, 20),
            _kernel("MatMul", at + 80, 100, op_type="aic", bound=None),
        ]
    windows = pd.concat([_chains(rows, n) for n in (2, 3)], ignore_index=True).assign(rank_id=0)
    chosen = chosen_chains(windows, pd.DataFrame(columns=["rank_id", "start_us", "span_us"]), RULES)
    assert set(chosen["kernels"]) == {"Muls → Add → Muls"} and len(chosen) == 10
    covered = pd.DataFrame({"rank_id": [0] * 6, "start_us": np.arange(6) * 200.0, "span_us": [80.0] * 6})
    assert len(chosen_chains(windows, covered, RULES)) < RULES["min_occurrences"]  # 4 left: too few


def test_the_planted_chain_is_found_on_every_rank_once_per_layer(planted_outputs):
    root, out = planted_outputs["fusible_chain"]
    truth = json.loads((root / "ground_truth.json").read_text())
    found = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]
    (finding,) = [f for f in found if f["finding_type"] == FINDING]
    assert finding["rank_ids"] == sorted(int(r) for r in truth["ranks"])
    metrics = finding["metrics"]
    assert metrics["kernels"] == "Muls → Add → Muls" and metrics["length"] == 3
    assert metrics["per_step"] == pytest.approx(2 * truth["workload"]["layers"])  # a layer's two residual adds
    assert metrics["mte_share"] > 0.8
    operators = pd.read_csv(out / schema.OPERATOR_SUMMARY_CSV.file)
    cited = operators[operators["evidence_id"].isin(finding["evidence_ids"])]
    assert len(cited) and set(cited["type"]) == {"Muls"}


def test_a_rank_read_out_of_order_is_put_in_start_order_ties_kept():
    """The chain detectors walk a rank's tasks in device order: normalize writes them so, and a rank that
    is not (an older output) is sorted, equal starts in the order they were read."""
    events = pd.DataFrame({"start_ns": [30, 10, 20, 10], "name": ["c", "a1", "b", "a2"]}, index=[7, 8, 9, 6])
    ordered = in_start_order(events)
    assert ordered["name"].tolist() == ["a1", "a2", "b", "c"] and ordered.index.tolist() == [0, 1, 2, 3]
    already = in_start_order(ordered.iloc[1:])
    assert already["name"].tolist() == ["a2", "b", "c"] and already.index.tolist() == [0, 1, 2]


def test_ranks_scanned_on_threads_come_back_whole_and_in_rank_order(planted_outputs):
    """scan_kernels_in_steps (a rank per thread) hands each rank's scan exactly its device tasks that start
    inside its steps' span, in file order, and returns the ranks in order, whichever thread finished first;
    ``ranks`` picks ranks, ``dictionary`` columns come as categoricals of the same texts."""
    from npuprof.pipeline import schema
    from npuprof.pipeline.options import AnalyzeOptions
    from npuprof.pipeline.runner import load_inputs
    from npuprof.pipeline.stages.base import RootContext
    from npuprof.pipeline.stages.diagnostics.rank_kernels import scan_kernels_in_steps

    _, out = planted_outputs["fusible_chain"]
    ctx = RootContext(out, load_inputs(out), AnalyzeOptions())
    columns = ["name", "start_ns", "end_ns"]
    events = ctx.read_table(schema.NORMALIZED_EVENTS, columns=[*columns, "rank_id"]).to_pandas()
    steps = ctx.read_table(schema.STEP_SEGMENTS, columns=["start_ns", "end_ns", "rank_id"]).to_pandas()
    read = []
    for rank, own in events.groupby("rank_id", sort=True):  # the plain definition, rank by rank
        first, last = (
            steps.loc[steps["rank_id"] == rank, "start_ns"].min(),
            steps.loc[steps["rank_id"] == rank, "end_ns"].max(),
        )
        inside = own[(own["start_ns"] >= first) & (own["start_ns"] < last)]
        read.append((int(rank), inside[[*columns, "rank_id"]].reset_index(drop=True)))
    scanned = scan_kernels_in_steps(ctx, columns, lambda rank, kernels: (rank, kernels), op_types=None)
    assert len(read) == len(ctx.inputs.ranks) == 4
    assert [rank for rank, _ in scanned] == [rank for rank, _ in read] == sorted(rank for rank, _ in read)
    for (rank, frame), (_, (seen, kernels)) in zip(read, scanned, strict=True):
        assert seen == rank and kernels.equals(frame) and len(frame)
    picked = scan_kernels_in_steps(
        ctx, columns, lambda rank, kernels: kernels, ranks={1, 3}, op_types=None, dictionary=("name",)
    )
    assert [rank for rank, _ in picked] == [1, 3]
    for rank, kernels in picked:
        assert isinstance(kernels["name"].dtype, pd.CategoricalDtype)
        assert kernels["name"].astype(str).tolist() == dict(read)[rank]["name"].tolist()
