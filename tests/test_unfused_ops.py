"""unfused_op_pattern: an RmsNorm written as tensor arithmetic is found as its chain of kernels on every
rank, priced against the fused kernel the capture runs on the same shape (its twin measures the same),
and a chain whose fused kernel the capture never runs is priced from the traffic a fused kernel saves."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from npuprof import knowledge
from npuprof.pipeline import schema
from npuprof.pipeline.stages.diagnostics.detectors.unfused_ops import (
    FINDING,
    TRAFFIC,
    _rank_chains,
    chain_starts,
    pattern_variants,
)

pytestmark = pytest.mark.xdist_group("planted")  # shares planted_outputs

PATTERNS = knowledge.load("diagnosis_rules")["findings"][FINDING]["patterns"]


def test_optional_kernels_make_variants_longest_first():
    variants = pattern_variants(["Cast?", "Pow|Square", "Mul"])
    assert [len(v) for v in variants] == [3, 2]
    assert variants[1] == [frozenset({"Pow", "Square"}), frozenset({"Mul"})]


def test_the_power_kernel_as_cann_writes_it_starts_an_rms_norm_chain():
    """Real CANN writes x ** 2 (aclnnPowTensorScalar) with Type ``Pows``: every power kernel type of the
    Qwen3 sample is one the rms_norm pattern accepts, and a chain of them is found."""
    from conftest import QWEN_TRAINING

    kernels = pd.read_csv(QWEN_TRAINING / "rank_2_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
    powers = set(kernels.loc[kernels["Name"].str.contains("aclnnPow", na=False), "Type"])
    assert powers == {"Pows"}
    accepted = {t for t in PATTERNS["rms_norm"]["sequence"][1].split("|")}
    assert powers <= accepted
    types = np.array(["Pows", "ReduceMean", "Adds", "Rsqrt", "Mul", "Mul"], dtype=object)
    assert chain_starts(types, PATTERNS) == [("rms_norm", 0, 6)]


def test_chains_are_consecutive_and_never_share_a_kernel():
    rms = ["Pow", "ReduceMean", "Adds", "Rsqrt", "Mul", "Mul"]
    types = np.array(["MatMulV3", *rms, "Swish", "Mul", "Pow", "ReduceMean", "MatMulV3", "Cast", *rms], dtype=object)
    found = chain_starts(types, PATTERNS)
    assert sorted(found) == [("rms_norm", 1, 6), ("rms_norm", 12, 7), ("swiglu", 7, 2)]  # the broken one is not


def test_without_the_fused_kernel_in_the_capture_the_chain_is_priced_by_traffic():
    """A SwiGLU chain on (t, f): silu reads and writes t·f, mul reads 2·t·f and writes t·f — 5 t·f moved;
    one fused kernel reads gate and up and writes the result — 3 t·f: 3/5 of the chain's kernel time."""
    t, f = 64, 128
    events = pd.DataFrame(
        {
            "name": ["aclnnSilu", "aclnnMul"],
            "type": ["Swish", "Mul"],
            "start_ns": [0, 12_000],
            "end_ns": [10_000, 22_000],
            "input_shapes": [f"{t},{f}", f"{t},{f};{t},{f}"],
            "input_dtypes": ["DT_BF16", "DT_BF16;DT_BF16"],
            "output_shapes": [f"{t},{f}", f"{t},{f}"],
            "output_dtypes": ["DT_BF16", "DT_BF16"],
        }
    )
    (chain,) = _rank_chains(0, events, PATTERNS).to_dict("records")
    assert chain["priced_by"] == TRAFFIC and chain["span_us"] == pytest.approx(22.0)
    assert chain["fused_us"] == pytest.approx(20.0 * 3 / 5)


def test_the_unfused_rms_norm_is_found_and_priced_by_the_fused_one_beside_it(planted_outputs):
    root, out = planted_outputs["unfused_rmsnorm"]
    truth = json.loads((root / "ground_truth.json").read_text())
    (finding,) = [
        f
        for f in json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]
        if f["finding_type"] == FINDING
    ]
    assert finding["rank_ids"] == sorted(int(r) for r in truth["ranks"])
    metrics = finding["metrics"]
    assert metrics["pattern"] == "rms_norm" and metrics["length"] == 6
    assert metrics["per_step"] == pytest.approx(truth["workload"]["layers"])  # one per dense layer's FFN
    assert "measured" in metrics["priced_by"]  # the attention's RmsNorm runs fused on the same shape
    operators = pd.read_csv(out / schema.OPERATOR_SUMMARY_CSV.file)
    cited = operators[operators["evidence_id"].isin(finding["evidence_ids"])]
    assert len(cited) and set(cited["type"]) == {"Pow"}


def _sample_kernel_names_and_types() -> pd.DataFrame:
    """Every distinct (Name, Type) of every kernel_details.csv in the samples."""
    from conftest import SAMPLES

    found = [
        pd.read_csv(path, usecols=["Name", "Type"]).drop_duplicates()
        for path in sorted(SAMPLES.rglob("kernel_details.csv"))
    ]
    return pd.concat(found).drop_duplicates().rename(columns={"Name": "name", "Type": "type"})


def _pattern_types() -> set[str]:
    """Every kernel type the chain detectors name: unfused_op_pattern's sequences and fused kernels,
    unfused_loss_chain's seeds, marks and fused kernels."""
    findings = knowledge.load("diagnosis_rules")["findings"]
    named = {t for spec in PATTERNS.values() for p in [*spec["sequence"], *spec["fused"]] for t in p.split("|")}
    loss = findings["unfused_loss_chain"]
    return {t.removesuffix("?") for t in named} | {*loss["seeds"], *loss["marks"], *loss["fused"]}


def test_an_aclnn_kernels_name_says_its_type_for_every_type_in_the_samples():
    """CANN names a kernel aclnn<Api>_<Impl>_<Type>: for every aclnn kernel of the samples that records a
    Type the chain detectors name, the op type read from its name alone (as from a capture without the
    Type column, like the samples' level-0 exports) is that Type, so the patterns match the same kernels
    either way (a varlen flash attention's name ends in its variant, after its Type); where the name says
    otherwise (a matmul's MatMulV5 for its Type MatMulV3) the Type is none the detectors name. The samples
    that record no Type get one from the name."""
    from npuprof.pipeline.stages.diagnostics.rank_kernels import op_types

    kernels = _sample_kernel_names_and_types()
    aclnn = kernels[kernels["name"].str.startswith("aclnn", na=False)]
    typed = aclnn[aclnn["type"].notna()]
    assert len(typed) >= 50  # the samples' aclnn kernels: a test over a handful would prove little
    from_names = op_types(typed.assign(type=None))
    differs = typed[from_names != typed["type"].to_numpy(object)]
    assert len(differs) <= 1 and not set(differs["type"]) & _pattern_types(), differs
    seen = set(typed["type"]) & _pattern_types()
    assert {"Pows", "Mul", "Cast", "Exp", "RealDiv", "Index", "IndexPutV2"} <= seen
    untyped = aclnn[aclnn["type"].isna()]
    assert {"LogSoftmaxV2", "NLLLoss", "Mul", "Cast"} <= set(op_types(untyped))
    assert list(op_types(kernels)[kernels["type"].notna().to_numpy()]) == list(kernels["type"].dropna())
