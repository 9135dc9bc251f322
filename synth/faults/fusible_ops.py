"""The faults whose findings fusible_ops reports (pipeline/stages/diagnostics/detectors/fusible_ops.py):
fusible_op_sequence."""

from __future__ import annotations

from typing import TYPE_CHECKING

from npuprof.synth.kernels import Kernel, aclnn, vector_kernel
from npuprof.synth.planting import Fault, FaultType, Scenario, register

if TYPE_CHECKING:
    from npuprof.synth.program import Workload


def _scaled_add(w: Workload, fault: Fault, single: list[Kernel]) -> list[Kernel]:
    """A residual add as the residual scaled, the block's output added and the sum scaled: three kernels,
    each reading its input from and writing its result to memory, whose times follow the bytes each moves
    at the single Add's bandwidth (it moves 3 t·h), so one kernel doing all three is the one Add."""
    x = f"{w.tokens},{w.model.hidden}"
    per_th = single[0].base_us / 3  # µs per t·h moved once
    return [
        vector_kernel("Muls", 2 * per_th, x, x, "elementwise"),
        aclnn("Add", "Add", "AI_VECTOR_CORE", 3 * per_th, "elementwise", f"{x};{x}", x, input_dtypes="DT_BF16;DT_BF16"),
        vector_kernel("Muls", 2 * per_th, x, x, "elementwise"),
    ]


register(
    FaultType(
        "fusible_op_sequence",
        ("ranks",),
        "both residual adds of every dense layer's FFN on ``ranks``, every rank when empty, as muls / add / muls: "
        "three memory-bound kernels, each reading the one before's result, whose times follow the bytes each moves; "
        "one Add with its scales moves what the single Add does",
        pieces={"ffn_residual_add": _scaled_add},
    ),
    scenarios=(
        Scenario(
            "fusible_chain",
            "dense prefill; every layer's two residual adds run as three memory-bound kernels each (muls, add, muls)",
            training=False,
            phase="prefill",
            micro_batches=1,
            faults=(Fault("fusible_op_sequence"),),
        ),
    ),
    twins=(
        # the twin runs the FFN's residual add as the one Add (its scales folded in)
        "fusible_chain",
    ),
)
