"""A vision encoder's convolutional stem ahead of the decoder (a multimodal model's image tower): blocks of
convolution, BatchNorm and ReLU per micro-batch, and their backward after the embedding's.

Converted with ``torch.nn.SyncBatchNorm.convert_sync_batchnorm`` (planted syncbn), each BatchNorm is a
SyncBatchNorm: its forward gathers every data-parallel rank's batch statistics (a small blocking
all-gather between the statistics and the normalisation) and its backward all-reduces the gradient sums,
each inside the framework op the host trace names (``SyncBatchNorm``, and autograd's
``SyncBatchNormBackward``). Plain BatchNorm runs the same kernels without the collectives.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from npuprof.synth.kernels import CUBE_CORES, Kernel, aclnn, hccl, vector_kernel
from npuprof.synth.program import HEAD, Program, Workload

if TYPE_CHECKING:
    from npuprof.synth.timeline import RankTimeline

IMAGE = "16,256,56,56"  # a micro-batch's feature maps: images, channels, height, width
CHANNELS = 256
SYNC_SCOPE = "SyncBatchNorm"
SYNC_BACKWARD_SCOPE = "autograd::engine::evaluate_function: SyncBatchNormBackward"
STATS_US = 200.0  # a statistics collective: its start alone (the bytes are a few KB)


def _bn_kernel(op: str, base_us: float, scope: str = "") -> Kernel:
    """A vector kernel over the stem's feature maps (BatchNorm, ReLU and their gradients), launched inside
    the framework op ``scope`` ("" for none)."""
    return replace(vector_kernel(op, base_us, IMAGE, IMAGE, "vector_mte"), host_scope=scope)


def _conv_kernel(api: str, op: str) -> Kernel:
    """A 3 × 3 convolution (or one of its gradients) over the stem's feature maps, on every cube core."""
    return aclnn(api, op, "AI_CORE", 120.0, "cube", f"{IMAGE};256,256,3,3", IMAGE, block_dim=CUBE_CORES)


def _stats_collective(op: str, w: Workload, scope: str) -> Kernel:
    """The per-channel statistics a SyncBatchNorm syncs over data parallel: sum, sum of squares, count."""
    stats_mb = (2 * CHANNELS + 1) * 4 * (w.world if op == "allGather" else 1) / 1e6
    return replace(hccl(op, "dp", STATS_US, stats_mb), host_scope=scope)


def vision_stem(p: Program, w: Workload, mb: int) -> None:
    """The stem's forward of one micro-batch: conv, BatchNorm's statistics and normalisation, ReLU."""
    synced = bool(w.planted("syncbn"))
    for _block in range(w.vision_blocks):
        p.add(_conv_kernel("Convolution", "Conv2D"), HEAD, micro_batch=mb, block="vision")
        scope = SYNC_SCOPE if synced else ""
        p.add(_bn_kernel("BNTrainingReduce", 30.0, scope), HEAD, micro_batch=mb, block="vision")
        if synced:
            p.add(_stats_collective("allGather", w, SYNC_SCOPE), HEAD, micro_batch=mb, block="vision")
        p.add(_bn_kernel("BNTrainingUpdate", 35.0, scope), HEAD, micro_batch=mb, block="vision")
        p.add(_bn_kernel("Relu", 15.0), HEAD, micro_batch=mb, block="vision")


def vision_stem_backward(p: Program, w: Workload, mb: int) -> None:
    """The stem's backward of one micro-batch, last block first."""
    synced = bool(w.planted("syncbn"))
    scope = SYNC_BACKWARD_SCOPE if synced else ""
    for _block in range(w.vision_blocks):
        p.add(_bn_kernel("ReluGrad", 15.0), HEAD, micro_batch=mb, block="vision")
        p.add(_bn_kernel("BNTrainingUpdateGrad", 35.0, scope), HEAD, micro_batch=mb, block="vision")
        if synced:
            p.add(_stats_collective("allReduce", w, SYNC_BACKWARD_SCOPE), HEAD, micro_batch=mb, block="vision")
        p.add(_bn_kernel("BNTrainingReduceGrad", 30.0, scope), HEAD, micro_batch=mb, block="vision")
        for op in ("Conv2DBackpropInput", "Conv2DBackpropFilter"):
            p.add(_conv_kernel("ConvolutionBackward", op), HEAD, micro_batch=mb, block="vision")


def host_scope_spans(t: RankTimeline) -> list[tuple[str, int, int]]:
    """(name, start_ns, end_ns) of each framework op the host launched kernels inside (``Kernel.host_scope``),
    for the trace and the db alike: one span per run of in-line events of one scope, from just before its
    first launch to just after its last launch ends."""
    scope = np.array([k.host_scope for k in t.kernels], dtype=object)[t.kernel_id]
    in_line = np.flatnonzero(~t.overlapped) if t.overlapped is not None else np.arange(len(scope))
    scope = scope[in_line]
    starts = np.flatnonzero((scope != "") & np.r_[True, scope[1:] != scope[:-1]])
    ends = np.r_[starts[1:], len(scope)]
    launch_ns = (t.start_ns - t.launch_lead_ns)[in_line]
    spans = []
    for first, stop in zip(starts, ends):  # a loop over the runs (a few per step)
        last = first + np.flatnonzero(scope[first:stop] == scope[first])[-1]
        spans.append((str(scope[first]), int(launch_ns[first]) - 1_000, int(launch_ns[last]) + 7_500))
    return spans
