"""unfused_loss_chain: an eager cross-entropy over the logits is found by its tensor — the kernels between
the LM head's matmuls on the logits' shape, interleaved with masks and collectives that are not its own —
and priced at most at its kernels' time: on Qwen3's last stage as the real kernels run, on a planted root
against its fused twin (test_recoverable), and never on a softmax that is not a loss."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers.planted import planted_finding

from npuprof import knowledge
from npuprof.pipeline import schema
from npuprof.pipeline.stages.diagnostics.detectors.loss_chain import FINDING, MEASURED, TRAFFIC, rank_loss_chains

pytestmark = pytest.mark.xdist_group("planted")  # shares planted_outputs

SPEC = knowledge.load("diagnosis_rules")["findings"][FINDING]
CSV_COLUMNS = {
    "Name": "name",
    "Type": "type",
    "Input Shapes": "input_shapes",
    "Input Data Types": "input_dtypes",
    "Output Shapes": "output_shapes",
    "Output Data Types": "output_dtypes",
}


def qwen_rank_kernels(rank: int) -> pd.DataFrame:
    """A Qwen3 rank's AI core kernels in device order, as the detector reads them (the category from the
    kernel type, as classify gives it: a matmul's, or none)."""
    from conftest import QWEN_TRAINING

    csv = pd.read_csv(QWEN_TRAINING / f"rank_{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
    csv = csv[csv["Accelerator Core"] != "COMMUNICATION"].sort_values("Start Time(us)", kind="stable")
    start_ns = (csv["Start Time(us)"] * 1000).round().astype("int64")
    return (
        csv.rename(columns=CSV_COLUMNS)[list(CSV_COLUMNS.values())]
        .assign(
            start_ns=start_ns.to_numpy(),
            end_ns=(start_ns + (csv["Duration(us)"] * 1000).round().astype("int64")).to_numpy(),
            primary_category=csv["Type"].str.startswith("MatMul").map({True: "compute.matmul", False: None}).to_numpy(),
        )
        .reset_index(drop=True)
    )


def test_the_qwen3_loss_is_found_on_the_last_stage_as_its_eleven_kernels_over_the_logits():
    """Rank 2 (the last stage) runs Megatron's fp32 vocab-parallel cross-entropy twice a step: the cast,
    max, sub, gather, exp, sum, div and the backward's gather, scatter, mul and cast over [4096, 1, 151936]
    (the gathers' operand seen 2-D, [4096, 151936]); the masks on [4096, 1] and the all-reduces between
    them are not the chain's. Rank 0 (the first stage) has no loss."""
    chains, members = rank_loss_chains(2, qwen_rank_kernels(2), SPEC)
    assert len(chains) == 2
    assert set(chains["kernels"]) == {
        "Cast → ArgMaxWithValue → Sub → Index → Exp → ReduceSum → RealDiv → Index → IndexPutV2 → Mul → Cast"
    }
    assert set(chains["logits"]) == {"4096 × 151936"} and set(chains["dtype"]) == {"FLOAT"}
    assert (chains["priced_by"] == TRAFFIC).all()  # the capture runs no fused loss
    # the kernels' own time (the csv's durations), within the span that also holds the masks and collectives
    assert chains["kernel_us"].sum() == pytest.approx(members["kernel_us"].sum())
    assert chains["kernel_us"].sum() / 1000 == pytest.approx(100.13, abs=0.05)
    assert (chains["kernel_us"] < chains["span_us"]).all()
    # never priced above the kernels it replaces, and each kernel carries its share of the saving
    assert ((chains["saved_us"] > 0) & (chains["saved_us"] < chains["kernel_us"])).all()
    assert members.groupby("chain")["saved_us"].sum().to_numpy() == pytest.approx(chains["saved_us"].to_numpy())
    chains_0, _ = rank_loss_chains(0, qwen_rank_kernels(0), SPEC)
    assert chains_0.empty


def _kernel(
    name: str, kind: str, start: int, us: float, shapes: str, dtypes: str, category: str | None = None, out: str = ""
) -> dict:
    """One kernel row; its output ``out`` (shape, dtype), else its first input's."""
    out_shape, out_dtype = out.split("/") if out else (shapes.split(";")[0], dtypes.split(";")[0])
    return {
        "name": name,
        "type": kind,
        "start_ns": start,
        "end_ns": start + int(us * 1000),
        "primary_category": category,
        "input_shapes": shapes,
        "input_dtypes": dtypes,
        "output_shapes": out_shape,
        "output_dtypes": out_dtype,
    }


def _sequence(kernels: list[tuple]) -> pd.DataFrame:
    rows, start = [], 0
    for kernel in kernels:
        rows.append(_kernel(*kernel[:1], kernel[1], start, *kernel[2:]))
        start += int(kernel[2] * 1000) + 2_000
    return pd.DataFrame(rows)


SCORES = "8,16,2048,2048"
LOGITS = "2048,32000"


def test_an_eager_softmax_without_a_gather_is_not_a_loss():
    """Attention scores exponentiated, summed and divided between two batch matmuls are a softmax (the
    unfused attention pattern's), not a loss: no chain."""
    events = _sequence(
        [
            ("bmm", "BatchMatMulV2", 300.0, f"{SCORES};8,16,2048,128", "FLOAT16;FLOAT16", "compute.matmul"),
            ("exp", "Exp", 200.0, SCORES, "FLOAT"),
            ("sum", "ReduceSum", 100.0, f"{SCORES};1", "FLOAT;INT64"),
            ("div", "RealDiv", 200.0, f"{SCORES};8,16,2048,1", "FLOAT;FLOAT"),
            ("bmm", "BatchMatMulV2", 300.0, f"{SCORES};8,16,2048,128", "FLOAT16;FLOAT16", "compute.matmul"),
        ]
    )
    chains, _ = rank_loss_chains(0, events, SPEC)
    assert chains.empty


def _loss(fused_us: tuple[float, float] | None) -> pd.DataFrame:
    """An eager loss (cast, exp, sum, div, gather) between two matmuls, then (``fused_us``) the fused
    loss and its gradient on the same logits elsewhere in the step."""
    head = ("lm_head", "MatMulV3", 400.0, "2048,4096;32000,4096", "DT_BF16;DT_BF16", "compute.matmul")
    kernels = [
        head,
        ("cast", "Cast", 60.0, LOGITS, "DT_BF16", None, f"{LOGITS}/FLOAT"),
        ("exp", "Exp", 80.0, LOGITS, "FLOAT"),
        ("sum", "ReduceSum", 40.0, f"{LOGITS};1", "FLOAT;INT64", None, "2048,1/FLOAT"),
        ("mask", "Less", 2.0, "2048,1;", "INT64;INT64"),
        ("div", "RealDiv", 80.0, f"{LOGITS};2048,1", "FLOAT;FLOAT"),
        ("gather", "GatherElements", 3.0, f"{LOGITS};2048,1", "FLOAT;INT64"),
        head,
    ]
    if fused_us is not None:
        kernels += [
            ("ce", "CrossEntropyLoss", fused_us[0], f"{LOGITS};2048", "DT_BF16;INT64"),
            ("ce_grad", "CrossEntropyLossGrad", fused_us[1], f"{LOGITS};2048", "DT_BF16;INT64"),
        ]
    return _sequence(kernels)


def test_the_chain_is_priced_by_the_fused_loss_where_the_rank_runs_it():
    chains, members = rank_loss_chains(0, _loss((9.0, 11.0)), SPEC)
    (chain,) = chains.to_dict("records")
    assert chain["kernels"] == "Cast → Exp → ReduceSum → RealDiv → GatherElements"  # not the mask
    assert chain["priced_by"] == MEASURED and chain["fused_us"] == pytest.approx(20.0)
    assert chain["saved_us"] == pytest.approx(263.0 - 20.0)


def test_without_the_fused_loss_four_passes_over_the_logits_price_it():
    """The cast, exp, sum and div move 6 + 8 + 4 + 8 = 26 bytes per logit (and a few per row) in 260 µs;
    a fused loss moves the bf16 logits 4 times: 8 bytes per logit, ~80 µs at that bandwidth. The gather
    touches a row's target, not its operand's bytes: it is not part of the bandwidth."""
    chains, _ = rank_loss_chains(0, _loss(None), SPEC)
    (chain,) = chains.to_dict("records")
    assert chain["priced_by"] == TRAFFIC
    assert chain["fused_us"] == pytest.approx(260.0 * 8 / 26, rel=0.01)


def test_the_planted_eager_loss_is_found_on_every_rank_once_a_step(planted_outputs):
    planted = planted_finding(planted_outputs, "eager_loss", FINDING)
    finding, metrics = planted.finding, planted.finding["metrics"]
    assert finding["rank_ids"] == sorted(int(r) for r in planted.truth["ranks"])
    assert metrics["length"] == 10 and metrics["per_step"] == pytest.approx(1.0)
    assert metrics["fused_ms"] < metrics["kernel_ms"] and finding["recoverable_ms_per_step"] <= metrics["kernel_ms"]
    operators = pd.read_csv(planted.out / schema.OPERATOR_SUMMARY_CSV.file)
    cited = operators[operators["evidence_id"].isin(finding["evidence_ids"])]
    assert len(cited) and set(cited["type"]) == {"Exp"}
