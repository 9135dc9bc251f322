"""The faults whose findings transdata reports (pipeline/stages/diagnostics/detectors/transdata.py):
transdata_heavy."""

from __future__ import annotations

from typing import TYPE_CHECKING

from npuprof.synth.kernels import Kernel
from npuprof.synth.planting import Fault, FaultType, Scenario, register

if TYPE_CHECKING:
    from npuprof.synth.program import Workload

# a conversion to FRACTAL_NZ reads and writes its tensor in 16 x 16 fractals: strided, well below the
# vector cores' streaming bandwidth (the real CNN capture's NCHW -> NC1HWC0 calls move 40-60 GB/s)
TRANSDATA_GBPS = 60.0
FRACTAL = 16


def _weight_converted(w: Workload, fault: Fault, projection: list[Kernel]) -> list[Kernel]:
    """The down projection's weight ([hidden, ffn] in ND, as the checkpoint loaded it) converted to
    FRACTAL_NZ by a TransData before each call, as aclnnMatmul does for a weight not cast ahead."""
    rows, cols = (int(d) for d in projection[0].input_shapes.split(";")[1].split(","))
    moved_bytes = 2 * rows * cols * 2  # read and written once, bf16
    conversion = Kernel(
        "aclnnMatmul_TransDataSpecial_TransData",
        "TransData",
        "AI_VECTOR_CORE",
        moved_bytes / (TRANSDATA_GBPS * 1e3),
        "vector_mte",
        input_shapes=f"{rows},{cols}",
        output_shapes=f"{cols // FRACTAL},{rows // FRACTAL},{FRACTAL},{FRACTAL}",
        output_formats="FRACTAL_NZ",
    )
    return [conversion, *projection]


register(
    FaultType(
        "transdata_heavy",
        ("ranks",),
        "the FFN's down projection weight of every dense layer on ``ranks``, every rank when empty, kept in ND "
        "and converted to FRACTAL_NZ by a TransData before every call, at TRANSDATA_GBPS; without it the weight "
        "was cast to FRACTAL_NZ once at load and the matmul reads it as it is",
        pieces={"ffn_down_projection": _weight_converted},
    ),
    scenarios=(
        Scenario(
            "transdata_weights",
            "dense prefill; every layer's FFN down projection weight stays in ND and a TransData converts it to "
            "FRACTAL_NZ before every call (no format cast at load): 4 conversions of a 1.5 MB weight per step, "
            "~5 % of it",
            training=False,
            phase="prefill",
            micro_batches=1,
            faults=(Fault("transdata_heavy"),),
        ),
    ),
    twins=(
        # the twin's weights were cast to FRACTAL_NZ at load: the matmuls run alone
        "transdata_weights",
    ),
)
