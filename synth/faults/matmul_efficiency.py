"""The faults whose findings matmul_efficiency reports (pipeline/stages/diagnostics/detectors/matmul_efficiency.py):
operator_low_efficiency."""

from __future__ import annotations

from npuprof.synth.planting import Fault, FaultType, Scenario, register

register(
    FaultType(
        "operator_low_efficiency",
        ("ranks",),
        "every dense layer's FFN on ``ranks``, every rank when empty, 4 columns short of the model's width, off the "
        "cube's 16 × 16 fractal: its two matmuls run at 0.4 of the speed their aligned shapes run at",
    ),
    scenarios=(
        Scenario(
            "unaligned_ffn",
            "dense prefill; every layer's FFN is 4 columns short of the model's width, off the cube's 16 x 16 "
            "fractal: its gate-up and down projections run at 0.4 of the aligned speed",
            training=False,
            phase="prefill",
            micro_batches=1,
            calibrated=True,
            card="Ascend910B1",
            faults=(Fault("operator_low_efficiency"),),
        ),
    ),
    twins=(
        # the twin's FFN is the model's width, its matmuls at the aligned speed (a few per thousand more FLOPs)
        "unaligned_ffn",
    ),
)
