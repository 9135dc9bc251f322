"""Kernel templates that look like the real captures (names, Type, Accelerator Core, shapes, dtypes).

Names follow what torch_npu writes: ``aclnn<Api>_<Impl>_<OpType>`` for aclnn launches, bare op
types for fused custom kernels, ``hcom_<op>__<hash3>_<seq>_1`` for HCCL (built at write time).
``profile`` says how the pipeline (PMU) time of the kernel splits over the AIC / AIV stages.
"""

from __future__ import annotations

from dataclasses import dataclass

# Pipeline profiles: share of the kernel's busy time per PMU stage, by bound.
PROFILES: dict[str, dict[str, float]] = {
    "cube": {"aic_mac": 0.62, "aic_mte2": 0.22, "aic_mte1": 0.08, "aic_fixpipe": 0.05, "aic_scalar": 0.03},
    "cube_mte2": {"aic_mac": 0.30, "aic_mte2": 0.55, "aic_mte1": 0.07, "aic_fixpipe": 0.04, "aic_scalar": 0.04},
    "vector": {"aiv_vec": 0.55, "aiv_mte2": 0.25, "aiv_mte3": 0.12, "aiv_scalar": 0.08},
    "vector_mte": {"aiv_vec": 0.15, "aiv_mte2": 0.55, "aiv_mte3": 0.25, "aiv_scalar": 0.05},
    # a scale / add / cast on one tensor: reading it in and writing it out is nearly all of its time
    "elementwise": {"aiv_vec": 0.06, "aiv_mte2": 0.60, "aiv_mte3": 0.30, "aiv_scalar": 0.04},
    "mix": {
        "aic_mac": 0.35,
        "aic_mte2": 0.12,
        "aic_fixpipe": 0.03,
        "aiv_vec": 0.30,
        "aiv_mte2": 0.12,
        "aiv_scalar": 0.08,
    },
    "comm_aiv": {"aiv_vec": 0.20, "aiv_mte2": 0.45, "aiv_mte3": 0.30, "aiv_scalar": 0.05},
    "none": {},
}


# the card synth's kernels are sized for (a 910B1 / 910B2: CANN's info.json ai_core_num, aiv_num); a
# kernel's blocks spread over its cores, and a full-width launch uses every one
CUBE_CORES = 24
VECTOR_CORES = 48
# rows per expert below which a grouped matmul is memory-bound (it streams its experts' weights longer
# than it multiplies them: profile cube_mte2): the card's ridge, ~350 TFLOP/s of fp16 cube over ~1.6 TB/s
# of HBM ≈ 220 FLOP per byte, and a GEMM of m rows against its weights does about m FLOPs per weight byte
CUBE_RIDGE_ROWS = 200
# what an aligned bf16 matmul sustains on the card of a calibrated scenario: 75 % of a 910B1's sustained
# roof (24 cube cores × 1,850 MHz × 4,096 MACs × 2 = 363.7 TFLOP/s peak; 0.95 sustained)
CALIBRATED_TFLOPS = 0.75 * 0.95 * 24 * 1850e6 * 4096 * 2 / 1e12


@dataclass(frozen=True)
class Kernel:
    """One kernel as it appears in kernel_details.csv, with a base duration at scale 1."""

    name: str
    type: str
    core: str
    base_us: float
    profile: str = "vector"
    block_dim: int = VECTOR_CORES
    mix_block_dim: int = 0
    input_shapes: str = ""
    input_dtypes: str = "DT_BF16"
    input_formats: str = "ND"
    output_shapes: str = ""
    output_dtypes: str = "DT_BF16"
    output_formats: str = "ND"
    # Communication kernels: HCCL op type (hcom_<op>_) and which parallel group runs it.
    hccl_group: str | None = None
    transfer_mb: float = 0.0
    # a buffer that is not 512-byte aligned: its last slice is this many bytes past a multiple (0: aligned)
    misaligned_bytes: int = 0
    # the framework op the host launches this kernel inside (trace_view's cpu_op span), "" for none
    host_scope: str = ""
    # the captured graph (ACL graph) a replayed kernel belongs to; None: launched eagerly
    model_id: int | None = None


def aclnn(api: str, op: str, core: str, base_us: float, profile: str, shapes_in: str, shapes_out: str, **kw) -> Kernel:
    """A kernel launched through an aclnn API, named the way torch_npu names it."""
    impl = f"{op}AiCore" if core == "AI_VECTOR_CORE" else f"{op}Common" if core == "AI_CORE" else op
    return Kernel(
        f"aclnn{api}_{impl}_{op}", op, core, base_us, profile, input_shapes=shapes_in, output_shapes=shapes_out, **kw
    )


EAGER_MODEL_ID = 4294967295  # kernel_details' Model ID of a kernel launched eagerly (CANN's UINT32 "none")
GRADIENT_BYTES_PER_US = 157e3  # the gradient all-reduce's bus speed beyond its 200 µs start (≈ 157 GB/s)


def scale_us(tokens: int, base: float, ref: int = 4096) -> float:
    """A kernel's duration at this many tokens, from its duration ``base`` at ``ref`` tokens."""
    return base * max(tokens, 1) / ref


def vector_kernel(op: str, base_us: float, shapes_in: str, shapes_out: str, profile: str = "vector") -> Kernel:
    """A vector-core aclnn kernel whose API is named like its op."""
    return aclnn(op, op, "AI_VECTOR_CORE", base_us, profile, shapes_in, shapes_out)


def hccl(op: str, group: str, base_us: float, transfer_mb: float) -> Kernel:
    """An HCCL collective / p2p op; name gets its group hash and sequence number when written."""
    return Kernel(
        f"hcom_{op}_",
        f"hcom_{op}_",
        "COMMUNICATION",
        base_us,
        "none",
        block_dim=0,
        input_shapes="",
        input_dtypes="",
        input_formats="",
        output_dtypes="",
        output_formats="",
        hccl_group=group,
        transfer_mb=transfer_mb,
    )
