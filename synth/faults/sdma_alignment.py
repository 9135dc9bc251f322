"""The faults whose findings sdma_alignment reports (pipeline/stages/diagnostics/detectors/sdma_alignment.py):
sdma_misaligned."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from npuprof.synth.kernels import Kernel
from npuprof.synth.planting import Fault, FaultType, Scenario, register

if TYPE_CHECKING:
    from npuprof.synth.program import Workload

MISALIGNED_BYTES = 256  # past a 512-byte multiple: the planted last bucket's last slice (the real CNN's offset)


def _cut_unaligned(w: Workload, fault: Fault, bucket: list[Kernel]) -> list[Kernel]:
    """The last bucket cut at a size that is not 512-byte aligned (its slow slice: comm_faults)."""
    return [replace(kernel, misaligned_bytes=MISALIGNED_BYTES) for kernel in bucket]


register(
    FaultType(
        "sdma_misaligned",
        ("factor",),
        "training's last gradient bucket, the embedding's, is cut at a size that is not 512-byte aligned: the last "
        "slice of its all-reduce is 256 bytes past a multiple and moves at 1 / factor of its aligned siblings' rate, "
        "so the op runs until that slice ends",
        also_reported=("communication_collective_slow",),
        pieces={"last_gradient_bucket": _cut_unaligned},
    ),
    scenarios=(
        Scenario(
            "misaligned_bucket",
            "dense training; the last gradient bucket (the embedding's) is cut at a size that is not 512-byte "
            "aligned, so one slice of its all-reduce moves at a third of its aligned siblings' rate and the "
            "optimizer waits for it",
            faults=(Fault("sdma_misaligned", factor=3.0),),
        ),
    ),
    twins=(
        # the twin's last bucket is 512-byte aligned: every slice of its all-reduce at the same rate
        "misaligned_bucket",
    ),
)
