"""Kernel categorisation and op_type on real kernel names."""

from __future__ import annotations

import pytest

from npuprof.pipeline.kernel_categories import classify_kernel, op_type_of_core

# (Name, Type, Accelerator Core) as they appear in real captures -> categories that must be present.
CURATED = [
    (
        "aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore",
        "FlashAttentionScore",
        "MIX_AIC",
        {"attention.flash_score"},
    ),
    (
        "aclnnFlashAttentionScoreGrad_FlashAttentionScoreGrad",
        "FlashAttentionScoreGrad",
        "MIX_AIC",
        {"attention.flash_score", "training.backward"},
    ),
    ("FusedInferAttentionScore", "FusedInferAttentionScore", "MIX_AIC", {"attention.flash_score"}),
    ("MlaPrologV2", "MlaPrologV2", "MIX_AIC", {"attention.mla", "attention.mla.preprocess"}),
    (
        "KvRmsNormRopeCache",
        "KvRmsNormRopeCache",
        "AI_VECTOR_CORE",
        {"attention.mla.kv_norm_rope_cache", "attention.rope"},
    ),
    ("SparseFlashAttention", "SparseFlashAttention", "MIX_AIC", {"attention.sparse_sharedkv"}),
    ("LightningIndexer", "LightningIndexer", "MIX_AIC", {"attention.lightning_indexer"}),
    ("aclnnMatmul_MatMulV3Common_MatMulV3", "MatMulV3", "AI_CORE", {"compute.matmul"}),
    ("GroupedMatmul", "GroupedMatmul", "AI_CORE", {"moe.expert_matmul", "compute.matmul"}),
    ("MoeGatingTopK", "MoeGatingTopK", "AI_VECTOR_CORE", {"moe.gating"}),
    ("MoeDistributeDispatch", "MoeDistributeDispatch", "COMMUNICATION", {"moe.dispatch"}),
    ("MoeDistributeCombine", "MoeDistributeCombine", "COMMUNICATION", {"moe.combine"}),
    ("DispatchFFNCombine", "DispatchFFNCombine", "COMMUNICATION", {"moe.dispatch_expert_compute"}),
    ("aclnnRmsNorm_RmsNorm_RmsNorm", "RmsNorm", "AI_VECTOR_CORE", {"normalization"}),
    ("AddRmsNorm", "AddRmsNorm", "AI_VECTOR_CORE", {"block_head.add_norm", "normalization"}),
    ("RmsNormGrad", "RmsNormGrad", "MIX_AIV", {"normalization", "training.backward"}),
    ("aclnnSwiGlu_SwiGlu_SwiGlu", "SwiGlu", "AI_VECTOR_CORE", {"ffn.activation"}),
    ("SwiGluGrad", "SwiGluGrad", "AI_VECTOR_CORE", {"ffn.activation", "training.backward"}),
    (
        "aclnnRotaryPositionEmbedding_RotaryPositionEmbedding",
        "RotaryPositionEmbedding",
        "AI_VECTOR_CORE",
        {"attention.rope"},
    ),
    ("ApplyAdamWV2", "ApplyAdamWV2", "AI_VECTOR_CORE", {"optimizer.update"}),
    ("EmbeddingDenseGradV2", "EmbeddingDenseGradV2", "MIX_AIV", {"embedding", "training.backward"}),
    ("hcom_allReduce__586_0_1", "hcom_allReduce_", "HCCL", {"communication.collective", "communication.allreduce"}),
    (
        "hcom_reduceScatter__170_2_1",
        "hcom_reduceScatter_",
        "COMMUNICATION",
        {"communication.collective", "communication.reducescatter"},
    ),
    (
        "hcom_allGather__170_3_1",
        "hcom_allGather_",
        "COMMUNICATION",
        {"communication.collective", "communication.allgather"},
    ),
    ("hcom_broadcast__483_0", "hcom_broadcast_", "HCCL", {"communication.broadcast", "communication.collective"}),
    ("hcom_batchSendRecv__128_3_1", "hcom_batchSendRecv_", "COMMUNICATION", {"communication.p2p"}),
    ("ArgMaxWithValue", "ArgMaxWithValue", "AI_VECTOR_CORE", {"sampling.argmax"}),
    ("trans_TransData_0", None, None, {"data_movement"}),
]


@pytest.mark.parametrize("name, kernel_type, core, expected", CURATED, ids=[c[0][:40] for c in CURATED])
def test_real_kernel_names_classify_as_expected(name, kernel_type, core, expected):
    categories, roles = classify_kernel(name, kernel_type, core)
    assert expected <= set(categories), categories
    assert roles


def test_p2p_is_not_also_a_collective():
    categories, _ = classify_kernel("hcom_batchSendRecv__128_3_1", "hcom_batchSendRecv_", "COMMUNICATION")
    assert "communication.collective" not in categories


def test_aclnn_api_prefix_does_not_leak_into_the_category():
    # The Cast launched by aclnnEmbedding is a Cast, not an embedding; the TransData of a matmul is not a matmul.
    assert classify_kernel("aclnnEmbedding_CastAiCore_Cast", "Cast", "AI_VECTOR_CORE")[0] == []
    assert "compute.matmul" not in classify_kernel("aclnnMatmul_TransData_TransData", "TransData", "AI_VECTOR_CORE")[0]


def test_broadcast_compute_kernel_is_not_communication():
    assert classify_kernel("BroadcastTo", "BroadcastTo", "AI_VECTOR_CORE")[0] == []


@pytest.mark.parametrize(
    "core, op_type",
    [
        ("AI_CORE", "aic"),
        ("AI_VECTOR_CORE", "aiv"),
        ("MIX_AIC", "mix_cv"),
        ("MIX_AIV", "mix_cv"),
        ("HCCL", "communication"),
        ("COMMUNICATION", "communication"),
        ("AI_CPU", "aicpu"),
        ("DSA_SQE", "dsa"),
        (None, "unknown"),
        ("N/A", "unknown"),
        ("SOMETHING_MIX_NEW", "mix_cv"),
        ("NEW_VECTOR", "aiv"),
        ("FUTURE_CORE", "aic"),
    ],
)
def test_op_type_from_accelerator_core(core, op_type):
    assert op_type_of_core(core) == op_type
