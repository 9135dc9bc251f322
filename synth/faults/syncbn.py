"""The faults whose findings syncbn reports (pipeline/stages/diagnostics/detectors/syncbn.py): syncbn."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from npuprof.synth.kernels import Kernel, hccl
from npuprof.synth.planting import Fault, FaultType, Scenario, register

if TYPE_CHECKING:
    from npuprof.synth.program import Workload

CHANNELS = 256  # the vision stem's channels (synth/vision.py)
SYNC_SCOPE = "SyncBatchNorm"
SYNC_BACKWARD_SCOPE = "autograd::engine::evaluate_function: SyncBatchNormBackward"
STATS_US = 200.0  # a statistics collective: its start alone (the bytes are a few KB)


def _stats_collective(op: str, w: Workload, scope: str) -> Kernel:
    """The per-channel statistics a SyncBatchNorm syncs over data parallel: sum, sum of squares, count."""
    stats_mb = (2 * CHANNELS + 1) * 4 * (w.world if op == "allGather" else 1) / 1e6
    return replace(hccl(op, "dp", STATS_US, stats_mb), host_scope=scope)


def _synced(w: Workload, fault: Fault, norm: list[Kernel]) -> list[Kernel]:
    """A SyncBatchNorm's forward: the statistics, a blocking all-gather of every rank's, the normalisation,
    inside the framework op the host trace names."""
    reduce, update = (replace(kernel, host_scope=SYNC_SCOPE) for kernel in norm)
    return [reduce, _stats_collective("allGather", w, SYNC_SCOPE), update]


def _synced_backward(w: Workload, fault: Fault, norm: list[Kernel]) -> list[Kernel]:
    """Its backward: the gradient sums all-reduced between the two gradient kernels, inside autograd's
    ``SyncBatchNormBackward``."""
    update, reduce = (replace(kernel, host_scope=SYNC_BACKWARD_SCOPE) for kernel in norm)
    return [update, _stats_collective("allReduce", w, SYNC_BACKWARD_SCOPE), reduce]


register(
    FaultType(
        "syncbn",
        (),
        "the scenario's vision encoder stem, ``vision_blocks``, converted with convert_sync_batchnorm: each BatchNorm"
        " gathers its statistics over data parallel in a blocking all-gather inside the host's ``SyncBatchNorm`` op, "
        "and all-reduces its gradient sums in the backward inside ``SyncBatchNormBackward``; plain BatchNorm runs the"
        " same kernels alone",
        pieces={"vision_batchnorm": _synced, "vision_batchnorm_backward": _synced_backward},
    ),
    scenarios=(
        Scenario(
            "syncbn_vision",
            "multimodal training: a vision encoder's stem of 4 conv + BatchNorm + ReLU blocks ahead of the decoder, "
            "converted to SyncBatchNorm: every BatchNorm gathers its batch statistics over data parallel in a "
            "blocking all-gather (and all-reduces its gradient sums in the backward), 16 small collectives per step",
            vision_blocks=4,
            faults=(Fault("syncbn"),),
        ),
    ),
    twins=(
        # the twin's vision stem runs plain BatchNorm: the same kernels, no statistics collectives
        "syncbn_vision",
    ),
)
