"""Kernel programs of one step: which kernels run, in which order, for which layer.

Two model families — a dense GQA transformer (Qwen-like: RmsNorm with QK-norm, fused qkv
MatMul, RoPE, flash attention, o_proj, SwiGlu MLP) and a MoE model with expert parallelism
(DeepSeek-like: MLA prolog, FusedInferAttentionScore, gating TopK, dispatch / GroupedMatmul /
combine) — each in an inference form (prefill or decode steps) and a training form (forward and
backward per micro-batch, gradient all-reduce, AdamW optimizer).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from npuprof.synth.kernels import Kernel, aclnn, hccl

HEAD, LAYER, TAIL = "head", "layer", "tail"


@dataclass(frozen=True)
class ModelSpec:
    """Sizes that drive shapes and base durations."""

    family: str  # dense | moe
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    experts: int = 0
    top_k: int = 0
    moe_ffn: int = 0


DENSE = ModelSpec("dense", hidden=1024, heads=16, kv_heads=8, head_dim=128, ffn=3072, vocab=151936)
MOE = ModelSpec(
    "moe", hidden=2048, heads=16, kv_heads=16, head_dim=128, ffn=6144, vocab=129280, experts=64, top_k=6, moe_ffn=1024
)


@dataclass
class Program:
    """One step's kernels on one rank, with the ground truth of what each event belongs to."""

    kernels: list[Kernel] = field(default_factory=list)
    kernel_ids: list[int] = field(default_factory=list)
    region: list[str] = field(default_factory=list)  # head | layer | tail
    layer_index: list[int] = field(default_factory=list)  # -1 outside layers
    layer_role: list[str] = field(default_factory=list)  # forward | backward | none
    micro_batch: list[int] = field(default_factory=list)
    block: list[str] = field(default_factory=list)  # attention | ffn | moe | head | tail | optimizer
    gap_before_us: list[float] = field(default_factory=list)  # extra host gap planted before the event
    _index: dict = field(default_factory=dict)

    def add(
        self, kernel: Kernel, region: str, layer: int = -1, role: str = "none", micro_batch: int = 0, block: str = ""
    ) -> None:
        if kernel not in self._index:
            self._index[kernel] = len(self.kernels)
            self.kernels.append(kernel)
        self.kernel_ids.append(self._index[kernel])
        self.region.append(region)
        self.layer_index.append(layer)
        self.layer_role.append(role)
        self.micro_batch.append(micro_batch)
        self.block.append(block or region)
        self.gap_before_us.append(0.0)

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "kernel_id": np.asarray(self.kernel_ids, dtype=np.int32),
            "region": np.asarray(self.region, dtype=object),
            "layer_index": np.asarray(self.layer_index, dtype=np.int32),
            "layer_role": np.asarray(self.layer_role, dtype=object),
            "micro_batch": np.asarray(self.micro_batch, dtype=np.int32),
            "block": np.asarray(self.block, dtype=object),
            "gap_before_us": np.asarray(self.gap_before_us, dtype=np.float64),
        }


@dataclass(frozen=True)
class Workload:
    """What one step computes: tokens, training or not, and per-rank load factors."""

    model: ModelSpec
    training: bool
    phase: str  # prefill | decode | train
    tokens: int
    layers: int
    micro_batches: int = 1
    world: int = 1
    tokens_factor: float = 1.0  # EP hot rank: routed tokens x f
    reduced_work: bool = False  # dummy rank: no routed tokens at all
    pp_stage: int = 0  # pipeline stage of this rank
    pp_size: int = 1
    tp: int = 1  # tensor parallel: heads, FFN and vocabulary are split over this many ranks
    wide_ffn_layers: tuple[int, ...] = ()  # planted shape change: these layers' FFN is twice as wide
    last_stage_layers: int | None = None  # decoder layers of the last pipeline stage; None: an even split

    @property
    def stage_layers(self) -> range:
        """The decoder layers this pipeline stage holds: the last stage ``last_stage_layers``, the rest
        split evenly over the other stages (the first takes any remainder)."""
        if self.pp_size == 1:
            return range(self.layers)
        even = self.layers // self.pp_size
        last = even if self.last_stage_layers is None else self.last_stage_layers
        if self.last_stage:
            return range(self.layers - last, self.layers)
        per_stage, extra = divmod(self.layers - last, self.pp_size - 1)
        start = 0 if self.first_stage else extra + self.pp_stage * per_stage
        return range(start, extra + (self.pp_stage + 1) * per_stage)

    @property
    def first_stage(self) -> bool:
        return self.pp_stage == 0

    @property
    def last_stage(self) -> bool:
        return self.pp_stage == self.pp_size - 1


def _scale(tokens: int, base: float, ref: int = 4096) -> float:
    return base * max(tokens, 1) / ref


def _dense_layer(p: Program, w: Workload, layer: int, mb: int) -> None:
    m, t = w.model, w.tokens
    # what one tensor-parallel rank holds (Megatron / vLLM column and row parallel linears)
    heads, kv_heads, ffn = m.heads // w.tp, max(1, m.kv_heads // w.tp), m.ffn // w.tp
    if layer in w.wide_ffn_layers:
        ffn *= 2
    qkv = (heads + 2 * kv_heads) * m.head_dim
    fa_type = (
        "FlashAttentionScore"
        if w.training
        else ("FusedInferAttentionScore" if w.phase == "decode" else "FlashAttentionScore")
    )
    add = lambda k, block: p.add(k, LAYER, layer, "forward", mb, block)  # noqa: E731
    add(
        aclnn(
            "RmsNorm",
            "RmsNorm",
            "AI_VECTOR_CORE",
            _scale(t, 14),
            "vector",
            f"{t},{m.hidden};{m.hidden}",
            f"{t},{m.hidden};{t},1",
        ),
        "attention",
    )
    add(
        aclnn(
            "Matmul",
            "MatMulV3",
            "AI_CORE",
            _scale(t, 95),
            "cube",
            f"{t},{m.hidden};{qkv},{m.hidden}",
            f"{t},{qkv}",
            block_dim=24,
        ),
        "attention",
    )
    add(
        aclnn(
            "RmsNorm",
            "RmsNorm",
            "AI_VECTOR_CORE",
            _scale(t, 9),
            "vector",
            f"{t},{heads},{m.head_dim};{m.head_dim}",
            f"{t},{heads},{m.head_dim}",
        ),
        "attention",
    )
    add(
        aclnn(
            "RmsNorm",
            "RmsNorm",
            "AI_VECTOR_CORE",
            _scale(t, 6),
            "vector",
            f"{t},{kv_heads},{m.head_dim};{m.head_dim}",
            f"{t},{kv_heads},{m.head_dim}",
        ),
        "attention",
    )
    add(
        aclnn(
            "RotaryPositionEmbedding",
            "RotaryPositionEmbedding",
            "AI_VECTOR_CORE",
            _scale(t, 11),
            "vector_mte",
            f"{t},{heads},{m.head_dim};{t},1,{m.head_dim}",
            f"{t},{heads},{m.head_dim}",
        ),
        "attention",
    )
    fa_us = _scale(t, 160) * (1.0 if w.phase != "decode" else 0.4)
    add(
        aclnn(
            fa_type,
            fa_type,
            "MIX_AIC",
            fa_us,
            "mix",
            f"{t},{heads * m.head_dim};{t},{kv_heads * m.head_dim};{t},{kv_heads * m.head_dim}",
            f"{t},{heads * m.head_dim}",
            block_dim=24,
            mix_block_dim=48,
        ),
        "attention",
    )
    add(
        aclnn(
            "Matmul",
            "MatMulV3",
            "AI_CORE",
            _scale(t, 60),
            "cube",
            f"{t},{heads * m.head_dim};{m.hidden},{heads * m.head_dim}",
            f"{t},{m.hidden}",
            block_dim=24,
        ),
        "attention",
    )
    if not w.training and w.world > 1:
        add(hccl("allReduce", "tp", _scale(t, 30), t * m.hidden * 2 / 1e6), "attention")
    add(
        aclnn(
            "Add",
            "Add",
            "AI_VECTOR_CORE",
            _scale(t, 7),
            "vector_mte",
            f"{t},{m.hidden};{t},{m.hidden}",
            f"{t},{m.hidden}",
        ),
        "ffn",
    )
    add(
        aclnn(
            "RmsNorm",
            "RmsNorm",
            "AI_VECTOR_CORE",
            _scale(t, 14),
            "vector",
            f"{t},{m.hidden};{m.hidden}",
            f"{t},{m.hidden};{t},1",
        ),
        "ffn",
    )
    add(
        aclnn(
            "Matmul",
            "MatMulV3",
            "AI_CORE",
            _scale(t, 210),
            "cube",
            f"{t},{m.hidden};{2 * ffn},{m.hidden}",
            f"{t},{2 * ffn}",
            block_dim=24,
        ),
        "ffn",
    )
    add(aclnn("SwiGlu", "SwiGlu", "AI_VECTOR_CORE", _scale(t, 25), "vector", f"{t},{2 * ffn}", f"{t},{ffn}"), "ffn")
    add(
        aclnn(
            "Matmul",
            "MatMulV3",
            "AI_CORE",
            _scale(t, 110),
            "cube",
            f"{t},{ffn};{m.hidden},{ffn}",
            f"{t},{m.hidden}",
            block_dim=24,
        ),
        "ffn",
    )
    if not w.training and w.world > 1:
        add(hccl("allReduce", "tp", _scale(t, 30), t * m.hidden * 2 / 1e6), "ffn")
    add(
        aclnn(
            "Add",
            "Add",
            "AI_VECTOR_CORE",
            _scale(t, 7),
            "vector_mte",
            f"{t},{m.hidden};{t},{m.hidden}",
            f"{t},{m.hidden}",
        ),
        "ffn",
    )


def _expert_exchange(w: Workload, step: str, shapes_in: str, shapes_out: str) -> Kernel:
    """Tokens to / from their experts: an all-to-all in training, the fused MC2 kernel in inference."""
    m, t = w.model, w.tokens
    transfer_mb = t * m.top_k * m.hidden * 2 / 1e6
    if w.training:
        return hccl("alltoallv", "exp", _scale(t * m.top_k, 40), transfer_mb)
    return Kernel(
        f"MoeDistribute{step}",
        f"MoeDistribute{step}",
        "COMMUNICATION",
        _scale(t * m.top_k, 45),
        "comm_aiv",
        block_dim=48,
        input_shapes=shapes_in,
        output_shapes=shapes_out,
        hccl_group="exp",
        transfer_mb=transfer_mb,
    )


def _moe_layer(p: Program, w: Workload, layer: int, mb: int) -> None:
    m, t = w.model, w.tokens
    role = "forward"
    add = lambda k, block: p.add(k, LAYER, layer, role, mb, block)  # noqa: E731
    routed = 0 if w.reduced_work else max(1, int(round(t * m.top_k * w.tokens_factor)))
    add(
        aclnn(
            "AddRmsNorm",
            "AddRmsNorm",
            "AI_VECTOR_CORE",
            _scale(t, 16),
            "vector",
            f"{t},{m.hidden};{t},{m.hidden};{m.hidden}",
            f"{t},{m.hidden}",
        ),
        "attention",
    )
    add(
        Kernel(
            "MlaPrologV2",
            "MlaPrologV2",
            "MIX_AIC",
            _scale(t, 120),
            "mix",
            block_dim=24,
            mix_block_dim=48,
            input_shapes=f"{t},{m.hidden};{m.hidden},1536;1536,{m.heads * 192}",
            output_shapes=f"{t},{m.heads},192",
        ),
        "attention",
    )
    add(
        Kernel(
            "FusedInferAttentionScore",
            "FusedInferAttentionScore",
            "MIX_AIC",
            _scale(t, 170),
            "mix",
            block_dim=24,
            mix_block_dim=48,
            input_shapes=f"{t},{m.heads},192;{t},1,576;{t},1,512",
            output_shapes=f"{t},{m.heads},128",
        ),
        "attention",
    )
    add(
        aclnn(
            "Matmul",
            "MatMulV3",
            "AI_CORE",
            _scale(t, 80),
            "cube",
            f"{t},{m.heads * 128};{m.hidden},{m.heads * 128}",
            f"{t},{m.hidden}",
            block_dim=24,
        ),
        "attention",
    )
    add(
        aclnn(
            "AddRmsNorm",
            "AddRmsNorm",
            "AI_VECTOR_CORE",
            _scale(t, 16),
            "vector",
            f"{t},{m.hidden};{t},{m.hidden};{m.hidden}",
            f"{t},{m.hidden}",
        ),
        "moe",
    )
    add(
        aclnn(
            "Matmul",
            "MatMulV2",
            "AI_CORE",
            _scale(t, 12),
            "cube",
            f"{t},{m.hidden};{m.experts},{m.hidden}",
            f"{t},{m.experts}",
            block_dim=8,
        ),
        "moe",
    )
    add(
        Kernel(
            "MoeGatingTopK",
            "MoeGatingTopK",
            "AI_VECTOR_CORE",
            _scale(t, 10),
            "vector",
            input_shapes=f"{t},{m.experts}",
            output_shapes=f"{t},{m.top_k};{t},{m.top_k}",
        ),
        "moe",
    )
    add(_expert_exchange(w, "Dispatch", f"{t},{m.hidden};{t},{m.top_k}", f"{routed},{m.hidden}"), "moe")
    gmm_us = _scale(routed, 38) if routed else 3.0
    local_experts = m.experts // max(w.world, 1)
    add(
        Kernel(
            "GroupedMatmul",
            "GroupedMatmul",
            "AI_CORE",
            gmm_us,
            "cube",
            block_dim=24,
            input_shapes=f"{routed},{m.hidden};{local_experts},{m.hidden},{2 * m.moe_ffn};{local_experts}",
            output_shapes=f"{routed},{2 * m.moe_ffn}",
        ),
        "moe",
    )
    add(
        aclnn(
            "SwiGlu",
            "SwiGlu",
            "AI_VECTOR_CORE",
            _scale(routed, 4) if routed else 2.0,
            "vector",
            f"{routed},{2 * m.moe_ffn}",
            f"{routed},{m.moe_ffn}",
        ),
        "moe",
    )
    add(
        Kernel(
            "GroupedMatmul",
            "GroupedMatmul",
            "AI_CORE",
            gmm_us / 2,
            "cube",
            block_dim=24,
            input_shapes=f"{routed},{m.moe_ffn};{local_experts},{m.moe_ffn},{m.hidden};{local_experts}",
            output_shapes=f"{routed},{m.hidden}",
        ),
        "moe",
    )
    add(_expert_exchange(w, "Combine", f"{routed},{m.hidden};{t},{m.top_k}", f"{t},{m.hidden}"), "moe")


_GRAD = {
    "RmsNorm": "RmsNormGrad",
    "SwiGlu": "SwiGluGrad",
    "RotaryPositionEmbedding": "RotaryPositionEmbeddingGrad",
    "FlashAttentionScore": "FlashAttentionScoreGrad",
    "FusedInferAttentionScore": "FlashAttentionScoreGrad",
    "MlaPrologV2": "MlaPrologV2Grad",
    "AddRmsNorm": "AddRmsNormGrad",
    "MoeGatingTopK": "MoeGatingTopKGrad",
}


def _backward_of(kernel: Kernel) -> list[Kernel]:
    """The backward kernels of one forward kernel: a *Grad kernel, or dgrad + wgrad for a matmul."""
    if kernel.hccl_group:
        return [kernel]  # the all-to-all runs again in backward
    if kernel.type in ("MatMulV3", "MatMulV2", "GroupedMatmul"):
        dgrad = Kernel(
            kernel.name,
            kernel.type,
            kernel.core,
            kernel.base_us,
            kernel.profile,
            kernel.block_dim,
            0,
            kernel.output_shapes + ";" + kernel.input_shapes.split(";")[-1],
            output_shapes=kernel.input_shapes.split(";")[0],
        )
        wgrad = Kernel(
            kernel.name,
            kernel.type,
            kernel.core,
            kernel.base_us * 1.05,
            "cube_mte2",
            kernel.block_dim,
            0,
            kernel.output_shapes + ";" + kernel.input_shapes.split(";")[0],
            output_shapes=kernel.input_shapes.split(";")[-1],
        )
        return [dgrad, wgrad]
    grad = _GRAD.get(kernel.type)
    if grad is None:
        return [kernel]  # elementwise ops (Add) run as themselves in backward
    core = "MIX_AIC" if kernel.core == "MIX_AIC" else ("MIX_AIV" if grad == "RmsNormGrad" else kernel.core)
    return [
        Kernel(
            f"aclnn{grad}_{grad}_{grad}",
            grad,
            core,
            kernel.base_us * 2.2,
            kernel.profile,
            kernel.block_dim,
            kernel.mix_block_dim,
            kernel.output_shapes + ";" + kernel.input_shapes,
            output_shapes=kernel.input_shapes,
        )
    ]


def _p2p(w: Workload) -> Kernel:
    """The activation / gradient exchange between neighbouring pipeline stages."""
    m, t = w.model, w.tokens
    return hccl("batchSendRecv", "pp", _scale(t, 60), t * m.hidden * 2 / 1e6)


def _head(p: Program, w: Workload, mb: int) -> None:
    m, t = w.model, w.tokens
    p.add(
        aclnn(
            "Embedding",
            "GatherV2",
            "AI_VECTOR_CORE",
            _scale(t, 20),
            "vector_mte",
            f"{m.vocab // w.tp},{m.hidden};{t}",
            f"{t},{m.hidden}",
        ),
        HEAD,
        micro_batch=mb,
    )


def _forward_layers(p: Program, w: Workload, mb: int) -> list[tuple[int, int, str]]:
    """Add this stage's forward layers; returns (kernel id, layer, block) of each event for the backward."""
    layer_fn = _dense_layer if w.model.family == "dense" else _moe_layer
    start = len(p.kernel_ids)
    for layer in w.stage_layers:
        layer_fn(p, w, layer, mb)
    return [(p.kernel_ids[i], p.layer_index[i], p.block[i]) for i in range(start, len(p.kernel_ids))]


def _tail_forward(p: Program, w: Workload, mb: int) -> Kernel:
    """Final norm and LM head (and sampling in inference); returns the LM head kernel."""
    m, t = w.model, w.tokens
    p.add(
        aclnn(
            "RmsNorm",
            "RmsNorm",
            "AI_VECTOR_CORE",
            _scale(t, 14),
            "vector",
            f"{t},{m.hidden};{m.hidden}",
            f"{t},{m.hidden}",
        ),
        TAIL,
        micro_batch=mb,
    )
    lm_tokens = t if w.training or w.phase == "decode" else max(1, t // 512)
    lm_head = aclnn(
        "Matmul",
        "MatMulV3",
        "AI_CORE",
        _scale(lm_tokens, 900),
        "cube",
        f"{lm_tokens},{m.hidden};{m.vocab // w.tp},{m.hidden}",
        f"{lm_tokens},{m.vocab // w.tp}",
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
    m, t = w.model, w.tokens
    p.add(
        aclnn(
            "CrossEntropyLoss",
            "CrossEntropyLoss",
            "AI_VECTOR_CORE",
            _scale(t, 120),
            "vector",
            f"{t},{m.vocab};{t}",
            f"{t}",
        ),
        TAIL,
        micro_batch=mb,
    )
    p.add(
        aclnn(
            "CrossEntropyLossGrad",
            "CrossEntropyLossGrad",
            "AI_VECTOR_CORE",
            _scale(t, 150),
            "vector",
            f"{t};{t},{m.vocab}",
            f"{t},{m.vocab}",
        ),
        TAIL,
        micro_batch=mb,
    )
    for kernel in _backward_of(lm_head):
        p.add(kernel, TAIL, micro_batch=mb)


def _backward_layers(p: Program, w: Workload, mb: int, forward_events: list[tuple[int, int, str]]) -> None:
    """The layers in reverse, each layer's kernels reversed and replaced by their grads."""
    by_layer: dict[int, list[tuple[int, str]]] = {}
    for kid, layer, block in forward_events:
        by_layer.setdefault(layer, []).append((kid, block))
    for layer in reversed(w.stage_layers):
        for kid, block in reversed(by_layer[layer]):
            for kernel in _backward_of(p.kernels[kid]):
                p.add(kernel, LAYER, layer, "backward", mb, block)


def _embedding_backward(p: Program, w: Workload, mb: int) -> None:
    m, t = w.model, w.tokens
    p.add(
        aclnn(
            "EmbeddingDenseBackward",
            "EmbeddingDenseGradV2",
            "MIX_AIV",
            _scale(t, 60),
            "vector_mte",
            f"{t},{m.hidden};{t}",
            f"{m.vocab},{m.hidden}",
        ),
        HEAD,
        micro_batch=mb,
    )


def _optimizer(p: Program, w: Workload) -> None:
    """Gradient all-reduce over the data-parallel group, gradient-norm clipping, AdamW."""
    m = w.model
    layers = len(w.stage_layers)
    grad_mb = 12 * m.hidden * m.hidden * layers * 2 / 1e6
    for _bucket in range(4):
        p.add(hccl("allReduce", "dp", 200.0 + 40 * layers, grad_mb / 4), TAIL, block="optimizer")
    p.add(aclnn("Norm", "LpNormV2", "MIX_AIV", 180.0, "vector", f"{layers * 9}", "1"), TAIL, block="optimizer")
    for _param in range(layers // 2 + 2):
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


def build_step(w: Workload) -> Program:
    """The kernel program of one step for one rank (one pipeline stage)."""
    p = Program()
    if not w.training:
        _head(p, w, 0)
        _forward_layers(p, w, 0)
        _tail_forward(p, w, 0)
        return p
    if w.pp_size == 1:
        # Gradient accumulation: forward and backward of each micro-batch in turn.
        for mb in range(w.micro_batches):
            _head(p, w, mb)
            forward = _forward_layers(p, w, mb)
            lm_head = _tail_forward(p, w, mb)
            _loss_and_lm_head_backward(p, w, mb, lm_head)
            _backward_layers(p, w, mb, forward)
            _embedding_backward(p, w, mb)
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
            _backward_layers(p, w, mb, forwards[mb])
            if w.first_stage:
                _embedding_backward(p, w, mb)
            else:
                p.add(_p2p(w), HEAD, micro_batch=mb, block="pipeline")
    _optimizer(p, w)
    return p
