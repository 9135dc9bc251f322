"""The faults synth plants: every kind (a finding type, or a capture condition), the parameters its ground
truth records, and what each does to the capture."""

from __future__ import annotations

from dataclasses import dataclass

# one RDMA retransmission timeout at HCCL_RDMA_TIMEOUT=14: 4.096 µs × 2^14 (the QP's local ACK timeout)
RDMA_TIMEOUT_EXPONENT = 14
RDMA_TIMEOUT_US = 4.096 * 2**RDMA_TIMEOUT_EXPONENT
STEP_TOP = -1  # a host stall's layer: at the top of the step, inside ProfilerStep#N before its first kernel


# every kind of fault synth can plant (a finding type, or a capture condition) and the parameters its
# ground truth records: adding a planting is adding its kind here and its mechanism
FAULT_PARAMETERS: dict[str, tuple[str, ...]] = {
    "slow_rank_suspected": ("ranks", "factor"),
    "ep_load_imbalance_suspected": ("ranks", "factor"),
    "device_idle_bubble": ("ranks", "steps", "layer", "gap_us"),
    "slow_link_suspected": ("link", "factor"),
    "aicpu_exposed": ("layer", "gap_us"),
    "reduced_work_or_dummy_rank": ("ranks",),
    "partial_capture": (),
    "clock_offset": ("ranks", "offset_us"),
    "aicore_freq_throttled": ("ranks", "steps", "factor"),
    "pp_stage_imbalance": ("ranks", "layer"),
    "pp_bubble_heavy": (),
    "dataloader_stall": ("ranks", "steps", "layer", "gap_us"),
    "gc_pause": ("ranks", "steps", "layer", "gap_us"),
    "allocation_heavy": ("ranks", "steps", "layer", "gap_us"),
    "host_launch_bound": ("ranks", "gap_us"),
    "capture_incomplete_group": ("ranks", "factor"),
    "rank_not_captured": ("ranks",),
    "gradient_allreduce_exposed": (),
    "block_dim_underuse": ("ranks", "factor"),
    "unfused_op_pattern": ("ranks",),
    "fusible_op_sequence": ("ranks",),
    "unfused_loss_chain": ("ranks",),
    "dynamic_shape_recompile": ("ranks", "steps", "layer", "gap_us"),
    "memcpy_in_step": ("ranks", "steps", "layer", "gap_us"),
    "env_setting": ("ranks", "gap_us"),
    "small_packet_collective": (),
    "bandwidth_contention": ("factor",),
    "operator_low_efficiency": ("ranks",),
    "rdma_retransmission": ("ranks", "steps", "gap_us"),
    "sdma_misaligned": ("factor",),
    "syncbn": (),
    "warmup_step": ("steps", "gap_us"),
}


@dataclass(frozen=True)
class Fault:
    """One planted fault. Which fields matter depends on ``kind``: the type of the finding it plants
    (one vocabulary for synth, ground truth, tests and the detectors), or a capture condition that
    no finding reports (partial_capture, clock_offset; segment and cross_rank measure them).

    kinds: slow_rank_suspected (compute × factor on ``ranks``), ep_load_imbalance_suspected (``ranks`` receive
    factor × the routed tokens of each other member of their expert group, the group's total unchanged),
    device_idle_bubble (``gap_us`` of host idle before ``layer`` on ``steps`` of ``ranks``), slow_link_suspected
    (bandwidth of ``link`` ÷ factor), aicpu_exposed (an AI CPU op of ``gap_us`` before ``layer`` on every step),
    reduced_work_or_dummy_rank (``ranks`` receive no routed tokens), partial_capture (first and last step cut),
    clock_offset (``offset_us`` added to ``ranks``' clocks), aicore_freq_throttled (the AI Core clock of
    ``ranks`` at nominal ÷ factor on ``steps``: their compute kernels take factor × as long for the same
    cycles), pp_stage_imbalance (the last pipeline stage, ``ranks``, holds ``layer`` decoder layers besides its
    LM head and loss; without it the split is balanced: the last stage holds one layer fewer than an even
    split), pp_bubble_heavy (the scenario's micro-batch count leaves the pipeline's own fill / drain bubble
    above a fifth of it), dataloader_stall, gc_pause, allocation_heavy and dynamic_shape_recompile (``gap_us``
    of the host in the dataloader / a garbage collection / a device memory allocation / an operator compile
    before ``layer`` on ``steps`` of ``ranks``, every rank when empty; layer -1: at the top of the step, inside
    ProfilerStep#N before its first kernel, as ``for batch in loader:`` stalls; a device_idle_bubble's host
    stall is a blocking ``.item()``), memcpy_in_step (a host-to-device copy of ``gap_us`` the device runs in
    stream order before ``layer`` on ``steps`` of ``ranks``, launched ahead by the host: its kernels wait behind
    it), env_setting (``ranks``, every rank when empty, record ASCEND_LAUNCH_BLOCKING=1, so every compute kernel
    waits ``gap_us`` for its launch, as host_launch_bound), host_launch_bound (every compute kernel of
    ``ranks``, every rank when empty, waits ``gap_us`` for the host to launch it), capture_incomplete_group
    (``ranks`` compute × factor and are left out of the capture: the captured members of their groups wait for a
    rank nobody sees), rank_not_captured (a capture condition: ``ranks`` are left out of the capture, nothing
    else changes), gradient_allreduce_exposed (training syncs its gradients in 4 all-reduce buckets after the
    whole backward; without it, one bucket per group of layers starts as their backward ends and runs on the
    communication stream under the rest of the backward, and the optimizer waits for the last),
    block_dim_underuse (the FFN's down projection of every dense layer on ``ranks``, every rank when empty,
    launched with 1/``factor`` of the cube cores' blocks: the same work on fewer cores takes factor × as long),
    unfused_op_pattern (the FFN's input RmsNorm of every dense layer on ``ranks``, every rank when empty,
    written as pow / mean / add / rsqrt / mul / mul: six kernels whose times follow the bytes each moves; the
    attention's RmsNorm of the same shape stays fused), fusible_op_sequence (both residual adds of every dense
    layer's FFN on ``ranks``, every rank when empty, as muls / add / muls: three memory-bound kernels, each
    reading the one before's result, whose times follow the bytes each moves; one Add with its scales moves what
    the single Add does), unfused_loss_chain (training's loss on ``ranks``, every rank when empty, as Megatron's
    unfused fp32 vocab-parallel cross-entropy: eleven kernels, eight over the whole logits whose times follow
    the bytes each moves at the fused CrossEntropyLoss and CrossEntropyLossGrad's bandwidth, which move the bf16
    logits four times), small_packet_collective (training's gradient clipping all-reduces each parameter
    tensor's 4-byte norm on its own over the data-parallel group, one after another behind each tensor's norm
    kernel; without it the norm is one kernel over every tensor, with no communication), bandwidth_contention (a
    collective on the communication stream beside compute transfers factor × as long as it does alone: the
    compute takes its share of the memory bandwidth), operator_low_efficiency (every dense layer's FFN on
    ``ranks``, every rank when empty, 4 columns short of the model's width, off the cube's 16 × 16 fractal: its
    two matmuls run at 0.4 of the speed their aligned shapes run at), rdma_retransmission (the first op over
    RDMA — a group of ``rdma_groups``, of ``ranks`` — in each of ``steps`` loses a packet and waits ``gap_us``,
    one RDMA retransmission timeout, before it ends; the capture records the HCCL_RDMA_TIMEOUT that makes it
    that long), sdma_misaligned (training's last gradient bucket, the embedding's, is cut at a size that is not
    512-byte aligned: the last slice of its all-reduce is 256 bytes past a multiple and moves at 1 / factor of
    its aligned siblings' rate, so the op runs until that slice ends), syncbn (the scenario's vision encoder
    stem, ``vision_blocks``, converted with convert_sync_batchnorm: each BatchNorm gathers its statistics over
    data parallel in a blocking all-gather inside the host's ``SyncBatchNorm`` op, and all-reduces its gradient
    sums in the backward inside ``SyncBatchNormBackward``; plain BatchNorm runs the same kernels alone),
    warmup_step (a capture condition: ``steps``, the first when empty, open with a ``gap_us`` broadcast over
    data parallel, as DDP broadcasts its parameters before the first forward; the other steps run without it).
    """

    kind: str
    ranks: tuple[int, ...] = ()
    steps: tuple[int, ...] = ()  # step ordinals (0-based); empty = every step
    factor: float = 1.0
    layer: int = 0
    gap_us: float = 0.0
    link: tuple[int, int] = (0, 1)
    offset_us: float = 0.0

    def as_dict(self) -> dict:
        base = {"kind": self.kind}
        keys = FAULT_PARAMETERS[self.kind]
        found = {k: list(getattr(self, k)) if isinstance(getattr(self, k), tuple) else getattr(self, k) for k in keys}
        if "steps" in found:  # ordinals, labelled as such: texts and findings number steps by captured id
            found["step_ordinals"] = found.pop("steps")
        return {**base, **found}
