"""The kernels of one decoder layer, forward and backward.

A dense GQA layer (Qwen-like: RmsNorm with QK-norm, fused qkv MatMul, RoPE, flash attention,
o_proj, SwiGlu MLP) and a MoE layer (DeepSeek-like: MLA prolog, FusedInferAttentionScore, gating
TopK, dispatch / GroupedMatmul / combine); the backward of each forward kernel.
"""

from __future__ import annotations

from npuprof.synth.faults import piece
from npuprof.synth.kernels import (
    CALIBRATED_TFLOPS,
    CUBE_CORES,
    CUBE_RIDGE_ROWS,
    VECTOR_CORES,
    Kernel,
    aclnn,
    hccl,
    scale_us,
    vector_kernel,
)
from npuprof.synth.program import LAYER, Program, Workload
from npuprof.synth.serving_kernels import fused_infer_attention

FULL_WIDTH_MIX = {"block_dim": CUBE_CORES, "mix_block_dim": VECTOR_CORES}  # a mixed kernel on every core


def _matmul(
    base_us: float, shapes_in: str, shapes_out: str, op: str = "MatMulV3", block_dim: int = CUBE_CORES
) -> Kernel:
    """A cube-core matmul launched through aclnnMatmul."""
    return aclnn("Matmul", op, "AI_CORE", base_us, "cube", shapes_in, shapes_out, block_dim=block_dim)


def _matmul_us(w: Workload, base_us: float, m: int, n: int, k: int) -> float:
    """A matmul's time: ``base_us``, or in a calibrated scenario its 2·m·n·k FLOPs at CALIBRATED_TFLOPS."""
    return 2.0 * m * n * k / (CALIBRATED_TFLOPS * 1e6) if w.calibrated else base_us


def _fused(op: str, core: str, base_us: float, profile: str, shapes_in: str, shapes_out: str, **kw) -> Kernel:
    """A fused custom kernel, named by its bare op type."""
    return Kernel(op, op, core, base_us, profile, input_shapes=shapes_in, output_shapes=shapes_out, **kw)


def _tp_all_reduce(w: Workload) -> list[Kernel]:
    """The row-parallel linear's all-reduce of inference over more than one tensor-parallel rank."""
    if w.training or w.tp <= 1:
        return []
    return [hccl("allReduce", "tp", scale_us(w.tokens, 30), w.tokens * w.model.hidden * 2 / 1e6)]


def _dense_attention(w: Workload) -> list[Kernel]:
    m, t = w.model, w.tokens
    # what one tensor-parallel rank holds (Megatron / vLLM column and row parallel linears)
    heads, kv_heads = m.heads // w.tp, max(1, m.kv_heads // w.tp)
    qkv = (heads + 2 * kv_heads) * m.head_dim
    flash = "FusedInferAttentionScore" if not w.training and w.phase == "decode" else "FlashAttentionScore"
    flash_us = scale_us(t, 160) * (1.0 if w.phase != "decode" else 0.4)
    q, kv = f"{t},{heads * m.head_dim}", f"{t},{kv_heads * m.head_dim}"
    return [
        vector_kernel("RmsNorm", scale_us(t, 14), f"{t},{m.hidden};{m.hidden}", f"{t},{m.hidden};{t},1"),
        _matmul(_matmul_us(w, scale_us(t, 95), t, qkv, m.hidden), f"{t},{m.hidden};{qkv},{m.hidden}", f"{t},{qkv}"),
        vector_kernel("RmsNorm", scale_us(t, 9), f"{t},{heads},{m.head_dim};{m.head_dim}", f"{t},{heads},{m.head_dim}"),
        vector_kernel(
            "RmsNorm", scale_us(t, 6), f"{t},{kv_heads},{m.head_dim};{m.head_dim}", f"{t},{kv_heads},{m.head_dim}"
        ),
        vector_kernel(
            "RotaryPositionEmbedding",
            scale_us(t, 11),
            f"{t},{heads},{m.head_dim};{t},1,{m.head_dim}",
            f"{t},{heads},{m.head_dim}",
            "vector_mte",
        ),
        fused_infer_attention(w, heads, kv_heads)
        if w.requests
        else aclnn(flash, flash, "MIX_AIC", flash_us, "mix", f"{q};{kv};{kv}", q, **FULL_WIDTH_MIX),
        _matmul(
            _matmul_us(w, scale_us(t, 60), t, m.hidden, heads * m.head_dim),
            f"{t},{heads * m.head_dim};{m.hidden},{heads * m.head_dim}",
            f"{t},{m.hidden}",
        ),
        *_tp_all_reduce(w),
    ]


def _rms_norm(w: Workload) -> list[Kernel]:
    """The FFN's input RmsNorm: one fused kernel (the piece ``ffn_input_norm``)."""
    m, t = w.model, w.tokens
    x = f"{t},{m.hidden}"
    return piece(w, "ffn_input_norm", [vector_kernel("RmsNorm", scale_us(t, 14), f"{x};{m.hidden}", f"{x};{t},1")])


def _residual_add(w: Workload) -> list[Kernel]:
    """A residual add of the FFN (the attention's before it, its own after it): one Add that moves 3 t·h,
    two inputs and the sum (the piece ``ffn_residual_add``)."""
    m, t = w.model, w.tokens
    x = f"{t},{m.hidden}"
    return piece(w, "ffn_residual_add", [vector_kernel("Add", scale_us(t, 7), f"{x};{x}", x, "vector_mte")])


UNALIGNED_BY = 4  # a planted unaligned FFN is this much narrower than the model's (not a multiple of 16)
UNALIGNED_SPEED = 0.4  # ... and its matmuls run at this share of the aligned ones' speed


def _dense_ffn(w: Workload, layer: int) -> list[Kernel]:
    """The FFN block; (planted) its width ``UNALIGNED_BY`` short of the model's, off the cube's 16 × 16
    fractal: both matmuls pad every tile and convert their operands' format, at ``UNALIGNED_SPEED`` of
    the aligned speed (the width's own FLOPs, a few per thousand, are left as they are)."""
    m, t = w.model, w.tokens
    ffn = m.ffn // w.tp * (2 if layer in w.wide_ffn_layers else 1)
    slow = 1.0
    if w.planted("operator_low_efficiency"):
        ffn, slow = ffn - UNALIGNED_BY, 1.0 / UNALIGNED_SPEED
    return [
        *_residual_add(w),
        *_rms_norm(w),
        _matmul(
            _matmul_us(w, scale_us(t, 210), t, 2 * ffn, m.hidden) * slow,
            f"{t},{m.hidden};{2 * ffn},{m.hidden}",
            f"{t},{2 * ffn}",
        ),
        vector_kernel("SwiGlu", scale_us(t, 25), f"{t},{2 * ffn}", f"{t},{ffn}"),
        *piece(
            w,
            "ffn_down_projection",
            [
                _matmul(
                    _matmul_us(w, scale_us(t, 110), t, m.hidden, ffn) * slow,
                    f"{t},{ffn};{m.hidden},{ffn}",
                    f"{t},{m.hidden}",
                )
            ],
        ),
        *_tp_all_reduce(w),
        *_residual_add(w),
    ]


def dense_layer(p: Program, w: Workload, layer: int, mb: int) -> None:
    """One dense decoder layer's forward kernels."""
    for block, kernels in (("attention", _dense_attention(w)), ("ffn", _dense_ffn(w, layer))):
        for kernel in kernels:
            p.add(kernel, LAYER, layer, "forward", mb, block)


def _expert_exchange(w: Workload, step: str, shapes_in: str, shapes_out: str, routed: int) -> Kernel:
    """Tokens to / from their experts: an all-to-all in training, the fused MC2 kernel in inference. Its
    time on a rank follows the ``routed`` tokens that rank receives (dispatch) or sends back (combine)."""
    m = w.model
    transfer_mb = routed * m.hidden * 2 / 1e6
    if w.training:
        return hccl("alltoallv", "exp", scale_us(routed, 40), transfer_mb)
    return _fused(
        f"MoeDistribute{step}",
        "COMMUNICATION",
        scale_us(routed, 45),
        "comm_aiv",
        shapes_in,
        shapes_out,
        block_dim=VECTOR_CORES,
        hccl_group="exp",
        transfer_mb=transfer_mb,
    )


def _mla_attention(w: Workload) -> list[Kernel]:
    m, t = w.model, w.tokens
    return [
        vector_kernel("AddRmsNorm", scale_us(t, 16), f"{t},{m.hidden};{t},{m.hidden};{m.hidden}", f"{t},{m.hidden}"),
        _fused(
            "MlaPrologV2",
            "MIX_AIC",
            scale_us(t, 120),
            "mix",
            f"{t},{m.hidden};{m.hidden},1536;1536,{m.heads * 192}",
            f"{t},{m.heads},192",
            block_dim=CUBE_CORES,
            mix_block_dim=VECTOR_CORES,
        ),
        _fused(
            "FusedInferAttentionScore",
            "MIX_AIC",
            scale_us(t, 170),
            "mix",
            f"{t},{m.heads},192;{t},1,576;{t},1,512",
            f"{t},{m.heads},128",
            block_dim=CUBE_CORES,
            mix_block_dim=VECTOR_CORES,
        ),
        _matmul(scale_us(t, 80), f"{t},{m.heads * 128};{m.hidden},{m.heads * 128}", f"{t},{m.hidden}"),
    ]


def _experts(w: Workload, routed: int) -> list[Kernel]:
    """The routed tokens through this rank's experts: up-projection, SwiGlu, down-projection."""
    m = w.model
    gmm_us = scale_us(routed, 38) if routed else 3.0
    local = m.experts // max(w.world, 1)
    # few rows per expert: the weights' reads dominate (a router's unevenness can cross this line)
    profile = "cube" if routed >= CUBE_RIDGE_ROWS * local else "cube_mte2"
    return [
        _fused(
            "GroupedMatmul",
            "AI_CORE",
            gmm_us,
            profile,
            f"{routed},{m.hidden};{local},{m.hidden},{2 * m.moe_ffn};{local}",
            f"{routed},{2 * m.moe_ffn}",
            block_dim=CUBE_CORES,
        ),
        vector_kernel(
            "SwiGlu", scale_us(routed, 4) if routed else 2.0, f"{routed},{2 * m.moe_ffn}", f"{routed},{m.moe_ffn}"
        ),
        _fused(
            "GroupedMatmul",
            "AI_CORE",
            gmm_us / 2,
            profile,
            f"{routed},{m.moe_ffn};{local},{m.moe_ffn},{m.hidden};{local}",
            f"{routed},{m.hidden}",
            block_dim=CUBE_CORES,
        ),
    ]


def _moe_block(w: Workload) -> list[Kernel]:
    m, t = w.model, w.tokens
    routed = 0 if w.reduced_work else max(1, int(round(t * m.top_k * w.tokens_factor)))
    gating = f"{t},{m.experts}"
    return [
        vector_kernel("AddRmsNorm", scale_us(t, 16), f"{t},{m.hidden};{t},{m.hidden};{m.hidden}", f"{t},{m.hidden}"),
        _matmul(scale_us(t, 12), f"{t},{m.hidden};{m.experts},{m.hidden}", gating, op="MatMulV2", block_dim=8),
        _fused("MoeGatingTopK", "AI_VECTOR_CORE", scale_us(t, 10), "vector", gating, f"{t},{m.top_k};{t},{m.top_k}"),
        _expert_exchange(w, "Dispatch", f"{t},{m.hidden};{t},{m.top_k}", f"{routed},{m.hidden}", routed),
        *_experts(w, routed),
        _expert_exchange(w, "Combine", f"{routed},{m.hidden};{t},{m.top_k}", f"{t},{m.hidden}", routed),
    ]


def moe_layer(p: Program, w: Workload, layer: int, mb: int) -> None:
    """One MoE decoder layer's forward kernels (MLA attention, routed experts; a serving forward's attention
    is GQA, as Qwen3's MoE models have it, through vLLM-Ascend's fused infer attention)."""
    attention = _dense_attention(w) if w.requests else _mla_attention(w)
    for block, kernels in (("attention", attention), ("moe", _moe_block(w))):
        for kernel in kernels:
            p.add(kernel, LAYER, layer, "forward", mb, block)


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


def _matmul_grads(kernel: Kernel) -> list[Kernel]:
    """dgrad (output grad x weight) and wgrad (output grad x input) of a matmul."""
    first_input, weight = kernel.input_shapes.split(";")[0], kernel.input_shapes.split(";")[-1]
    dgrad = Kernel(
        kernel.name,
        kernel.type,
        kernel.core,
        kernel.base_us,
        kernel.profile,
        kernel.block_dim,
        0,
        kernel.output_shapes + ";" + weight,
        output_shapes=first_input,
    )
    wgrad = Kernel(
        kernel.name,
        kernel.type,
        kernel.core,
        kernel.base_us * 1.05,
        "cube_mte2",
        kernel.block_dim,
        0,
        kernel.output_shapes + ";" + first_input,
        output_shapes=weight,
    )
    return [dgrad, wgrad]


def backward_of(kernel: Kernel) -> list[Kernel]:
    """The backward kernels of one forward kernel: a *Grad kernel, or dgrad + wgrad for a matmul."""
    if kernel.hccl_group:
        return [kernel]  # the all-to-all runs again in backward
    if kernel.type in ("MatMulV3", "MatMulV2", "GroupedMatmul"):
        return _matmul_grads(kernel)
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
