"""The faults whose findings block_dim reports (pipeline/stages/diagnostics/detectors/block_dim.py):
block_dim_underuse."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from npuprof.synth.kernels import Kernel
from npuprof.synth.planting import Fault, FaultType, Scenario, register

if TYPE_CHECKING:
    from npuprof.synth.program import Workload


def _fewer_blocks(w: Workload, fault: Fault, projection: list[Kernel]) -> list[Kernel]:
    """The down projection's matmul launched on 1/``factor`` of the blocks it had: its work over fewer cube
    cores takes as much longer."""
    return [
        replace(k, base_us=k.base_us * fault.factor, block_dim=round(k.block_dim / fault.factor))
        if k.core == "AI_CORE"
        else k
        for k in projection
    ]


register(
    FaultType(
        "block_dim_underuse",
        ("ranks", "factor"),
        "the FFN's down projection of every dense layer on ``ranks``, every rank when empty, launched with "
        "1/``factor`` of the cube cores' blocks: the same work on fewer cores takes factor × as long",
        pieces={"ffn_down_projection": _fewer_blocks},
    ),
    scenarios=(
        Scenario(
            "narrow_matmul",
            "dense prefill; every layer's FFN down projection is launched on a third of the cube cores",
            training=False,
            phase="prefill",
            micro_batches=1,
            faults=(Fault("block_dim_underuse", factor=3.0),),
        ),
    ),
    twins=(
        # the twin launches the down projection on every cube core: the same work, a third of the time
        "narrow_matmul",
    ),
)
