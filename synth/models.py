"""Kernel programs of one step: which kernels run, in which order, for which layer.

Two model families (``program.DENSE``, ``program.MOE``; their layers in ``layers``), each in an
inference form (prefill or decode steps) and a training form (forward and backward per
micro-batch, pipeline stages exchanging activations, gradient all-reduce, AdamW optimizer).
"""

from __future__ import annotations

import numpy as np

from npuprof.synth.faults import piece
from npuprof.synth.kernels import CUBE_CORES, GRADIENT_BYTES_PER_US, Kernel, aclnn, hccl, scale_us
from npuprof.synth.layers import backward_of, dense_layer, moe_layer
from npuprof.synth.program import HEAD, LAYER, TAIL, Program, Workload
from npuprof.synth.vision import vision_stem, vision_stem_backward


def _p2p(w: Workload) -> Kernel:
    """The activation / gradient exchange between neighbouring pipeline stages."""
    m, t = w.model, w.tokens
    return hccl("batchSendRecv", "pp", scale_us(t, 60), t * m.hidden * 2 / 1e6)


def _head(p: Program, w: Workload, mb: int) -> None:
    m, t = w.model, w.tokens
    p.add(
        aclnn(
            "Embedding",
            "GatherV2",
            "AI_VECTOR_CORE",
            scale_us(t, 20),
            "vector_mte",
            f"{m.vocab // w.tp},{m.hidden};{t}",
            f"{t},{m.hidden}",
        ),
        HEAD,
        micro_batch=mb,
    )


def _forward_layers(p: Program, w: Workload, mb: int) -> list[tuple[int, int, str]]:
    """Add this stage's forward layers; returns (kernel id, layer, block) of each event for the backward."""
    layer_fn = dense_layer if w.model.family == "dense" else moe_layer
    start = len(p.kernel_ids)
    for layer in w.stage_layers:
        layer_fn(p, w, layer, mb)
    return [(p.kernel_ids[i], p.layer_index[i], p.block[i]) for i in range(start, len(p.kernel_ids))]


def _final_norm(p: Program, w: Workload, mb: int) -> None:
    """The model's final RmsNorm."""
    m, t = w.model, w.tokens
    p.add(
        aclnn(
            "RmsNorm",
            "RmsNorm",
            "AI_VECTOR_CORE",
            scale_us(t, 14),
            "vector",
            f"{t},{m.hidden};{m.hidden}",
            f"{t},{m.hidden}",
        ),
        TAIL,
        micro_batch=mb,
    )


def _tail_forward(p: Program, w: Workload, mb: int) -> Kernel:
    """Final norm and LM head (and sampling in inference); returns the LM head kernel."""
    m, t = w.model, w.tokens
    _final_norm(p, w, mb)
    # a serving forward's LM head computes each request's last position; a prefill scenario's one per 512
    lm_tokens = w.sampled or w.requests or (t if w.training or w.phase == "decode" else max(1, t // 512))
    lm_head = aclnn(
        "Matmul",
        "MatMulV3",
        "AI_CORE",
        scale_us(lm_tokens, 900),
        "cube",
        f"{lm_tokens},{m.hidden};{m.vocab // w.tp},{m.hidden}",
        f"{lm_tokens},{m.vocab // w.tp}",
        block_dim=CUBE_CORES,
    )
    p.add(lm_head, TAIL, micro_batch=mb)
    if not w.training:
        p.add(
            Kernel(
                "ArgMaxWithValue",
                "ArgMaxWithValue",
                "AI_VECTOR_CORE",
                18.0,
                "vector",
                input_shapes=f"{lm_tokens},{m.vocab // w.tp}",
                output_shapes=f"{lm_tokens}",
                input_dtypes="FLOAT",
            ),
            TAIL,
        )
    return lm_head


def _loss_and_lm_head_backward(p: Program, w: Workload, mb: int, lm_head: Kernel) -> None:
    """The loss (the piece ``loss``: the fused CrossEntropyLoss and its gradient), then the LM head's
    backward."""
    m, t = w.model, w.tokens
    fused = [
        aclnn(
            "CrossEntropyLoss", "CrossEntropyLoss", "AI_VECTOR_CORE", scale_us(t, 120), "vector",
            f"{t},{m.vocab};{t}", f"{t}",
        ),
        aclnn(
            "CrossEntropyLossGrad", "CrossEntropyLossGrad", "AI_VECTOR_CORE", scale_us(t, 150), "vector",
            f"{t};{t},{m.vocab}", f"{t},{m.vocab}",
        ),
    ]  # fmt: skip
    for kernel in (*piece(w, "loss", fused), *backward_of(lm_head)):
        p.add(kernel, TAIL, micro_batch=mb)


def _backward_layers(
    p: Program, w: Workload, mb: int, forward_events: list[tuple[int, int, str]], bucket_after: frozenset[int]
) -> None:
    """The layers in reverse, each layer's kernels reversed and replaced by their grads; a gradient
    bucket's all-reduce issued after each layer of ``bucket_after``."""
    by_layer: dict[int, list[tuple[int, str]]] = {}
    for kid, layer, block in forward_events:
        by_layer.setdefault(layer, []).append((kid, block))
    for layer in reversed(w.stage_layers):
        for kid, block in reversed(by_layer[layer]):
            for kernel in backward_of(p.kernels[kid]):
                p.add(kernel, LAYER, layer, "backward", mb, block)
        if layer in bucket_after:
            _gradient_bucket(p, w)


def _embedding_backward(p: Program, w: Workload, mb: int) -> None:
    m, t = w.model, w.tokens
    p.add(
        aclnn(
            "EmbeddingDenseBackward",
            "EmbeddingDenseGradV2",
            "MIX_AIV",
            scale_us(t, 60),
            "vector_mte",
            f"{t},{m.hidden};{t}",
            f"{m.vocab},{m.hidden}",
        ),
        HEAD,
        micro_batch=mb,
    )


def _layer_parameters(w: Workload) -> tuple[float, float]:
    """Parameters of one decoder layer on this rank (the standard formulas; heads and FFN split over TP):
    (replicated over the data-parallel ranks, this rank's own routed experts — split over every rank,
    so no other rank holds a copy to sync with)."""
    m, tp = w.model, w.tp
    attention = (m.hidden * m.heads * m.head_dim * 2 + 2 * m.hidden * m.kv_heads * m.head_dim) / tp
    if m.family == "dense":
        return attention + 3 * m.hidden * m.ffn / tp + 2 * m.hidden, 0.0
    local_experts = m.experts // max(w.world, 1)
    return attention + m.hidden * m.experts + 2 * m.hidden, local_experts * 3 * m.hidden * m.moe_ffn


def _gradient_parameters(w: Workload) -> tuple[float, float]:
    """(parameters whose gradients this rank all-reduces over data parallel, parameters it updates): its
    stage's decoder layers plus the embedding on the first stage and the LM head on the last (V / TP · h
    each) — which is why moving a layer between stages changes the sync of neither by a layer's whole
    share."""
    replicated, own = _layer_parameters(w)
    layers = len(w.stage_layers)
    synced = layers * replicated + (w.first_stage + w.last_stage) * (w.model.vocab // w.tp) * w.model.hidden
    return synced, synced + layers * own


def _bucket_count(w: Workload) -> int:
    """Gradient buckets: 4, or one per layer of the stage when it holds fewer and they overlap the backward."""
    return min(4, len(w.stage_layers)) if w.overlap_gradients else 4


def _gradient_bucket(p: Program, w: Workload, last: bool = False) -> None:
    """One bucket's all-reduce over the data-parallel group (bf16 gradients), or its reduce-scatter under a
    distributed optimizer (half the bus traffic): during the backward on the communication stream when
    gradients overlap, else in line before the optimizer. The ``last`` bucket (the embedding's gradients)
    is the piece ``last_gradient_bucket``."""
    bucket_bytes = _gradient_parameters(w)[0] * 2 / _bucket_count(w)
    op, traffic = ("reduceScatter", 0.5) if w.distributed_optimizer else ("allReduce", 1.0)
    kernels = [hccl(op, "dp", 200.0 + traffic * bucket_bytes / GRADIENT_BYTES_PER_US, bucket_bytes / 1e6)]
    for kernel in piece(w, "last_gradient_bucket", kernels) if last else kernels:
        p.add(kernel, TAIL, block="optimizer", overlapped=w.overlap_gradients)


def _parameter_gather(p: Program, w: Workload, region: str = TAIL) -> None:
    """A distributed optimizer's all-gather of the updated parameter shards, one per gradient bucket: in line
    after the update (at the ``TAIL``), or — where gradients overlap the backward, with overlap_param_gather
    — at the top of the step (``HEAD``), on the communication stream under its forward: the previous
    update's shards, gathered while the layers compute."""
    bucket_bytes = _gradient_parameters(w)[0] * 2 / 4
    for _bucket in range(4):
        p.add(
            hccl("allGather", "dp", 200.0 + 0.5 * bucket_bytes / GRADIENT_BYTES_PER_US, bucket_bytes / 1e6),
            region,
            block="optimizer",
            overlapped=region == HEAD,
        )


def _bucket_layers(w: Workload) -> frozenset[int]:
    """The layers after whose backward (in the last micro-batch) a bucket is issued when gradients overlap:
    the last of each of the first buckets' layer groups; the last bucket follows the whole backward."""
    if not w.overlap_gradients:
        return frozenset()
    groups = np.array_split(np.array(list(reversed(w.stage_layers))), _bucket_count(w))
    return frozenset(int(g[-1]) for g in groups[:-1])


NORM_TENSORS_PER_LAYER = 9  # a dense layer's parameter tensors (norms, q / k / v / o, gate-up, down ...)


def _gradient_norm(p: Program, w: Workload, tensors: int) -> None:
    """Gradient clipping's norm over ``tensors`` parameter tensors (the piece ``gradient_norm``): one
    LpNorm over all of them (the ranks hold synced gradients: no communication). Its first kernel waits
    for every overlapped bucket."""
    norm = [aclnn("Norm", "LpNormV2", "MIX_AIV", 180.0, "vector", f"{tensors}", "1")]
    for index, kernel in enumerate(piece(w, "gradient_norm", norm)):
        p.add(kernel, TAIL, block="optimizer", joins=w.overlap_gradients and index == 0)


def _optimizer(p: Program, w: Workload) -> None:
    """Gradient all-reduce (reduce-scatter) over the data-parallel group in 4 buckets (unless they
    overlapped the backward), gradient-norm clipping, AdamW: each as long as the parameters the rank
    updates make it; a distributed optimizer's parameter all-gather last. The norm waits for every bucket."""
    m = w.model
    layers = len(w.stage_layers)
    # a distributed optimizer updates the rank's own shard of the parameters
    parameters = _gradient_parameters(w)[1] / (w.world // w.tp if w.distributed_optimizer else 1)
    for _bucket in range(0 if w.overlap_gradients else 4):
        _gradient_bucket(p, w)
    _gradient_norm(p, w, layers * NORM_TENSORS_PER_LAYER)
    # one fused AdamW per ~25 M parameters
    for _param in range(max(round(parameters / 25e6), 1)):
        p.add(
            aclnn(
                "ApplyAdamW",
                "ApplyAdamWV2",
                "AI_VECTOR_CORE",
                65.0,
                "vector_mte",
                f"{m.hidden * 64};{m.hidden * 64}",
                f"{m.hidden * 64}",
                input_dtypes="FLOAT;FLOAT",
            ),
            TAIL,
            block="optimizer",
        )
    if w.distributed_optimizer and not w.overlap_gradients:
        _parameter_gather(p, w)


def build_step(w: Workload) -> Program:
    """The kernel program of one step for one rank (one pipeline stage)."""
    p = Program()
    last_buckets = _bucket_layers(w)
    if w.training and w.distributed_optimizer and w.overlap_gradients:
        _parameter_gather(p, w, HEAD)  # overlap_param_gather: under this step's forward
    if not w.training:
        _head(p, w, 0)
        _forward_layers(p, w, 0)
        if w.dummy:  # the model's final norm ends it: nothing samples its output
            _final_norm(p, w, 0)
        else:
            _tail_forward(p, w, 0)
        return p
    if w.pp_size == 1:
        # Gradient accumulation: forward and backward of each micro-batch in turn.
        for mb in range(w.micro_batches):
            vision_stem(p, w, mb)
            _head(p, w, mb)
            forward = _forward_layers(p, w, mb)
            lm_head = _tail_forward(p, w, mb)
            _loss_and_lm_head_backward(p, w, mb, lm_head)
            _backward_layers(p, w, mb, forward, last_buckets if mb == w.micro_batches - 1 else frozenset())
            _embedding_backward(p, w, mb)
            vision_stem_backward(p, w, mb)
    else:
        # Pipeline parallel (GPipe order): every micro-batch forward, then every micro-batch backward;
        # neighbouring stages exchange activations and gradients with batchSendRecv.
        forwards = {}
        lm_heads = {}
        for mb in range(w.micro_batches):
            if w.first_stage:
                _head(p, w, mb)
            else:
                p.add(_p2p(w), HEAD, micro_batch=mb, block="pipeline")
            forwards[mb] = _forward_layers(p, w, mb)
            if w.last_stage:
                lm_heads[mb] = _tail_forward(p, w, mb)
            else:
                p.add(_p2p(w), TAIL, micro_batch=mb, block="pipeline")
        for mb in range(w.micro_batches):
            if w.last_stage:
                _loss_and_lm_head_backward(p, w, mb, lm_heads[mb])
            else:
                p.add(_p2p(w), TAIL, micro_batch=mb, block="pipeline")
            _backward_layers(p, w, mb, forwards[mb], last_buckets if mb == w.micro_batches - 1 else frozenset())
            if w.first_stage:
                _embedding_backward(p, w, mb)
            else:
                p.add(_p2p(w), HEAD, micro_batch=mb, block="pipeline")
    if w.overlap_gradients:
        _gradient_bucket(p, w, last=True)  # the last bucket: the embedding's (or first layers') gradients, once ready
    _optimizer(p, w)
    return p
