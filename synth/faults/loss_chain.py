"""The faults whose findings loss_chain reports (pipeline/stages/diagnostics/detectors/loss_chain.py):
unfused_loss_chain."""

from __future__ import annotations

from typing import TYPE_CHECKING

from npuprof.synth.kernels import Kernel, aclnn, scale_us
from npuprof.synth.planting import Fault, FaultType, Scenario, register

if TYPE_CHECKING:
    from npuprof.synth.program import Workload

FUSED_LOSS_PASSES = 4  # a fused cross-entropy reads the bf16 logits 3 times and writes their gradient once


def _eager_loss(w: Workload, fault: Fault, fused: list[Kernel]) -> list[Kernel]:
    """The loss as Megatron's unfused vocab-parallel cross-entropy in fp32: the logits cast, their max
    subtracted, exponentiated, summed and divided, the target's logit gathered; in the backward the
    one-hot scattered into the softmax, scaled and cast back. The kernels over the whole (t, V) tensor take
    the bytes each moves at the fused loss's bandwidth (it moves the bf16 logits ``FUSED_LOSS_PASSES``
    times); the gather, scatter and (t,) arithmetic their launch's own time. The logits are seen 3-D
    ([t, 1, V]) and 2-D ([t, V]), as torch_npu records them."""
    t, vocab = w.tokens, w.model.vocab // w.tp
    fused_us = sum(kernel.base_us for kernel in fused)  # the fused loss and its gradient
    per_element = fused_us / (FUSED_LOSS_PASSES * 2)  # µs per byte of every element of the logits, × t·V

    def over_logits(op: str, moved: int, shapes_in: str, dtypes_in: str, dtype_out: str = "FLOAT") -> Kernel:
        return aclnn(
            op, op, "AI_VECTOR_CORE", moved * per_element, "vector_mte", shapes_in, f"{t},1,{vocab}",
            input_dtypes=dtypes_in, output_dtypes=dtype_out,
        )  # fmt: skip

    def small(op: str, shapes_in: str, dtypes_in: str, shapes_out: str) -> Kernel:
        return aclnn(
            op, op, "AI_VECTOR_CORE", scale_us(t, 2), "vector", shapes_in, shapes_out,
            input_dtypes=dtypes_in, output_dtypes="FLOAT",
        )  # fmt: skip

    logits, rows = f"{t},1,{vocab}", f"{t},1,1"
    return [
        over_logits("Cast", 6, logits, "DT_BF16"),
        aclnn(
            "MaxDim",
            "ArgMaxWithValue",
            "AI_VECTOR_CORE",
            4 * per_element,
            "vector_mte",
            logits,
            f"{rows};{rows}",
            input_dtypes="FLOAT",
            output_dtypes="FLOAT;INT32",
        ),  # fmt: skip
        over_logits("Sub", 8, f"{logits};{rows}", "FLOAT;FLOAT"),
        small("Index", f"{t},{vocab};{t}", "FLOAT;INT64", f"{t}"),
        over_logits("Exp", 8, logits, "FLOAT"),
        aclnn(
            "ReduceSum",
            "ReduceSum",
            "AI_VECTOR_CORE",
            4 * per_element,
            "vector_mte",
            logits,
            rows,
            input_dtypes="FLOAT",
            output_dtypes="FLOAT",
        ),  # fmt: skip
        small("Log", rows, "FLOAT", rows),
        over_logits("RealDiv", 8, f"{logits};{rows}", "FLOAT;FLOAT"),
        small("IndexPutV2", f"{t},{vocab};{t};{t}", "FLOAT;FLOAT;INT64", f"{t},{vocab}"),
        over_logits("Mul", 8, f"{logits};{rows}", "FLOAT;FLOAT"),
        over_logits("Cast", 6, logits, "FLOAT", "DT_BF16"),
    ]


register(
    FaultType(
        "unfused_loss_chain",
        ("ranks",),
        "training's loss on ``ranks``, every rank when empty, as Megatron's unfused fp32 vocab-parallel "
        "cross-entropy: eleven kernels, eight over the whole logits whose times follow the bytes each moves at the "
        "fused CrossEntropyLoss and CrossEntropyLossGrad's bandwidth, which move the bf16 logits four times",
        pieces={"loss": _eager_loss},
    ),
    scenarios=(
        Scenario(
            "eager_loss",
            "dense training, data parallel, one micro-batch a step; the loss runs as an eager fp32 cross-entropy "
            "over the logits (cast, max, sub, exp, sum, div, gather; scatter, mul, cast) where its twin runs the "
            "fused CrossEntropyLoss and CrossEntropyLossGrad",
            micro_batches=1,
            faults=(Fault("unfused_loss_chain"),),
        ),
    ),
    twins=(
        # the twin runs the loss as the fused CrossEntropyLoss and its gradient, once a step
        "eager_loss",
    ),
)
