"""The faults whose findings small_packets reports (pipeline/stages/diagnostics/detectors/small_packets.py):
small_packet_collective."""

from __future__ import annotations

from typing import TYPE_CHECKING

from npuprof.synth.kernels import GRADIENT_BYTES_PER_US, Kernel, aclnn, hccl
from npuprof.synth.planting import Fault, FaultType, Scenario, register

if TYPE_CHECKING:
    from npuprof.synth.program import Workload

NORM_BYTES = 4  # one fp32 norm


def _per_tensor(w: Workload, fault: Fault, norm: list[Kernel]) -> list[Kernel]:
    """Each tensor's norm all-reduced on its own over the data-parallel group (a per-tensor clip or
    overflow check): as many 4-byte all-reduces as tensors, back to back behind their norms, each only
    the collective's 200 µs start."""
    (whole,) = norm
    tensors = int(whole.input_shapes)
    one = aclnn("Norm", "LpNormV2", "MIX_AIV", whole.base_us / tensors, "vector", "1", "1")
    reduce = hccl("allReduce", "dp", 200.0 + NORM_BYTES / GRADIENT_BYTES_PER_US, NORM_BYTES / 1e6)
    return [kernel for _ in range(tensors) for kernel in (one, reduce)]


register(
    FaultType(
        "small_packet_collective",
        (),
        "training's gradient clipping all-reduces each parameter tensor's 4-byte norm on its own over the "
        "data-parallel group, one after another behind each tensor's norm kernel; without it the norm is one kernel "
        "over every tensor, with no communication",
        pieces={"gradient_norm": _per_tensor},
    ),
    scenarios=(
        Scenario(
            "small_packets",
            "dense training; gradient clipping all-reduces each parameter tensor's norm on its own over the "
            "data-parallel group: 36 four-byte all-reduces back to back before the optimizer",
            faults=(Fault("small_packet_collective"),),
        ),
    ),
    twins=(
        # the twin takes the clipping norm as one kernel with no all-reduce: one 4-byte all-reduce's latency
        # (1 in 36) more than bucketing the norms into one all-reduce saves
        "small_packets",
    ),
)
