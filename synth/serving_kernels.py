"""The kernels of a serving forward as vLLM-Ascend runs them: the attention, and graph replays.

The attention is ``torch_npu.npu_fused_infer_attention_score`` in the TND layout, written with its input
slots as kernel_details.csv lists them (an absent optional input is an empty slot): 0–2 query, key and
value, 4 the attention mask, 5 ``actual_seq_lengths`` and 6 ``actual_seq_lengths_kv`` (one per request:
B), 14 the block table (B × the most blocks a request may hold, not the batch's longest: the KV lengths
themselves are values, which no shape carries). A forward replayed from a captured ACL graph runs its
kernels with the graph's Model ID (``as_run``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from npuprof.synth.kernels import CUBE_CORES, VECTOR_CORES, Kernel, aclnn, scale_us
from npuprof.synth.planting import Forward
from npuprof.synth.program import HEAD, LAYER, Workload

BLOCK_SIZE = 128  # tokens per KV-cache block
MAX_BLOCKS_PER_REQUEST = 256  # max_model_len 32768 / BLOCK_SIZE: the block table's width
KV_CACHE_BLOCKS = 4096  # blocks in the KV cache
MASK_SIDE = 2048  # vLLM-Ascend's compressed causal mask (sparse_mode 3)
QUERY, KEY, VALUE, MASK, SEQ_LENGTHS, KV_SEQ_LENGTHS, BLOCK_TABLE = 0, 1, 2, 4, 5, 6, 14
ATTENTION = "FusedInferAttentionScore"
DECODE_ATTENTION_SHARE = 0.4  # a decode token's attention time against a prefill token's


def fused_infer_attention(w: Workload, heads: int, kv_heads: int) -> Kernel:
    """The attention of one serving forward's layer: query [T, N, D]; the fresh keys and values [T, N_kv, D]
    for a prefill, the paged cache [blocks, BLOCK_SIZE, N_kv·D] with its block table otherwise."""
    t, b, d = w.tokens, w.requests, w.model.head_dim
    paged = w.phase != "prefill"
    slots = [""] * (BLOCK_TABLE + 1)
    dtypes = [""] * (BLOCK_TABLE + 1)
    slots[QUERY] = f"{t},{heads},{d}"
    kv = f"{KV_CACHE_BLOCKS},{BLOCK_SIZE},{kv_heads * d}" if paged else f"{t},{kv_heads},{d}"
    slots[KEY] = slots[VALUE] = kv
    dtypes[QUERY] = dtypes[KEY] = dtypes[VALUE] = "DT_BF16"
    if w.phase != "decode":
        slots[MASK], dtypes[MASK] = f"{MASK_SIDE},{MASK_SIDE}", "BOOL"
    slots[SEQ_LENGTHS] = slots[KV_SEQ_LENGTHS] = f"{b}"
    dtypes[SEQ_LENGTHS] = dtypes[KV_SEQ_LENGTHS] = "INT64"
    if paged:
        slots[BLOCK_TABLE], dtypes[BLOCK_TABLE] = f"{b},{MAX_BLOCKS_PER_REQUEST}", "INT32"
    else:
        slots, dtypes = slots[: KV_SEQ_LENGTHS + 1], dtypes[: KV_SEQ_LENGTHS + 1]
    share = DECODE_ATTENTION_SHARE if w.phase == "decode" else 1.0
    return aclnn(
        ATTENTION,
        ATTENTION,
        "MIX_AIC",
        max(scale_us(t, 160) * share, 8.0),
        "mix",
        ";".join(slots),
        slots[QUERY],
        input_dtypes=";".join(dtypes),
        input_formats=";".join("ND" if dtype else "" for dtype in dtypes),
        block_dim=CUBE_CORES,
        mix_block_dim=VECTOR_CORES,
    )


# the captured graphs' Model IDs: one of the whole decode forward, one of the pieces between attentions
GRAPH_MODEL_IDS = {"full": 1, "piecewise": 2}


def as_run(forward: Forward, kernels: list[Kernel], arrays: dict[str, np.ndarray]) -> list[Kernel]:
    """The kernel of each event of one forward (``kernels`` by ``arrays``' kernel ids) as it ran: eager, or
    replayed from a captured graph — the embedding and the layers (a full graph), or those without the
    layers' attention (piecewise); the final norm, LM head and sampling run eager after the replay."""
    events = [kernels[k] for k in arrays["kernel_id"]]
    if forward.graph == "eager":
        return events
    in_graph = np.isin(arrays["region"], (HEAD, LAYER))
    model_id = GRAPH_MODEL_IDS[forward.graph]
    return [
        replace(kernel, model_id=model_id)
        if replayed and kernel.hccl_group is None and not (forward.graph == "piecewise" and kernel.type == ATTENTION)
        else kernel
        for kernel, replayed in zip(events, in_graph)
    ]
