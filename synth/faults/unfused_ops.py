"""The faults whose findings unfused_ops reports (pipeline/stages/diagnostics/detectors/unfused_ops.py):
unfused_op_pattern."""

from __future__ import annotations

from typing import TYPE_CHECKING

from npuprof.synth.kernels import Kernel, scale_us, vector_kernel
from npuprof.synth.planting import Fault, FaultType, Scenario, register

if TYPE_CHECKING:
    from npuprof.synth.program import Workload


def _six_kernels(w: Workload, fault: Fault, fused: list[Kernel]) -> list[Kernel]:
    """The FFN's input RmsNorm as six kernels, each reading its input from and writing its result to
    memory: their times follow the bytes each moves at the fused kernel's bandwidth (it moves the (t, h)
    input once and its result once: 2 t·h)."""
    m, t = w.model, w.tokens
    x, row = f"{t},{m.hidden}", f"{t},1"
    per_th = scale_us(t, 7)  # µs per t·h moved once
    tiny = scale_us(t, 0.5)  # a (t, 1) vector: the launch's own time
    return [
        vector_kernel("Pow", 2 * per_th, x, x),
        vector_kernel("ReduceMean", per_th, x, row),
        vector_kernel("Adds", tiny, row, row),
        vector_kernel("Rsqrt", tiny, row, row),
        vector_kernel("Mul", 2 * per_th, f"{x};{row}", x),
        vector_kernel("Mul", 2 * per_th, f"{x};{m.hidden}", x),
    ]


register(
    FaultType(
        "unfused_op_pattern",
        ("ranks",),
        "the FFN's input RmsNorm of every dense layer on ``ranks``, every rank when empty, written as pow / mean / "
        "add / rsqrt / mul / mul: six kernels whose times follow the bytes each moves; the attention's RmsNorm of the"
        " same shape stays fused",
        pieces={"ffn_input_norm": _six_kernels},
    ),
    scenarios=(
        Scenario(
            "unfused_rmsnorm",
            "dense prefill; every layer's FFN RmsNorm runs as six kernels (pow, mean, add, rsqrt, mul, mul)",
            training=False,
            phase="prefill",
            micro_batches=1,
            faults=(Fault("unfused_op_pattern"),),
        ),
    ),
    twins=(
        # the twin runs the FFN's RmsNorm as the one fused kernel
        "unfused_rmsnorm",
    ),
)
