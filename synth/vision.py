"""A vision encoder's convolutional stem ahead of the decoder (a multimodal model's image tower): blocks of
convolution, BatchNorm and ReLU per micro-batch, and their backward after the embedding's.

A BatchNorm's kernels are the pieces ``vision_batchnorm`` and ``vision_batchnorm_backward``: converted
with ``torch.nn.SyncBatchNorm.convert_sync_batchnorm`` (planted syncbn, synth/faults/syncbn.py), they sync
their statistics over data parallel. Plain BatchNorm runs the same kernels without the collectives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from npuprof.synth.faults import piece
from npuprof.synth.kernels import CUBE_CORES, Kernel, aclnn, vector_kernel
from npuprof.synth.program import HEAD, Program, Workload

if TYPE_CHECKING:
    from npuprof.synth.timeline import RankTimeline

IMAGE = "16,256,56,56"  # a micro-batch's feature maps: images, channels, height, width


def _bn_kernel(op: str, base_us: float) -> Kernel:
    """A vector kernel over the stem's feature maps (BatchNorm, ReLU and their gradients)."""
    return vector_kernel(op, base_us, IMAGE, IMAGE, "vector_mte")


def _conv_kernel(api: str, op: str) -> Kernel:
    """A 3 × 3 convolution (or one of its gradients) over the stem's feature maps, on every cube core."""
    return aclnn(api, op, "AI_CORE", 120.0, "cube", f"{IMAGE};256,256,3,3", IMAGE, block_dim=CUBE_CORES)


def vision_stem(p: Program, w: Workload, mb: int) -> None:
    """The stem's forward of one micro-batch: conv, BatchNorm's statistics and normalisation (the piece
    ``vision_batchnorm``), ReLU."""
    for _block in range(w.vision_blocks):
        p.add(_conv_kernel("Convolution", "Conv2D"), HEAD, micro_batch=mb, block="vision")
        norm = [_bn_kernel("BNTrainingReduce", 30.0), _bn_kernel("BNTrainingUpdate", 35.0)]
        for kernel in (*piece(w, "vision_batchnorm", norm), _bn_kernel("Relu", 15.0)):
            p.add(kernel, HEAD, micro_batch=mb, block="vision")


def vision_stem_backward(p: Program, w: Workload, mb: int) -> None:
    """The stem's backward of one micro-batch, last block first (BatchNorm's gradient: the piece
    ``vision_batchnorm_backward``)."""
    for _block in range(w.vision_blocks):
        norm = [_bn_kernel("BNTrainingUpdateGrad", 35.0), _bn_kernel("BNTrainingReduceGrad", 30.0)]
        for kernel in (_bn_kernel("ReluGrad", 15.0), *piece(w, "vision_batchnorm_backward", norm)):
            p.add(kernel, HEAD, micro_batch=mb, block="vision")
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
