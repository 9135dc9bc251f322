"""Twins: each planted fault's scenario generated again without that fault (same seed, same shapes).

A finding's ``recoverable_ms_per_step`` claims how much shorter the mean step would be without its
cause; the twin is that step, measured. ``TWINS`` lists the (scenario, finding type) pairs the tests
check and ``bench/twins.py`` tabulates.
"""

from __future__ import annotations

from dataclasses import replace

from npuprof.synth.faults import Fault
from npuprof.synth.scenarios import SCENARIOS, Scenario

# (scenario, the finding whose fault the twin leaves out: a fault is named by the finding it plants)
TWINS: tuple[tuple[str, str], ...] = (
    ("slow_rank", "slow_rank_suspected"),
    ("host_bubble", "device_idle_bubble"),
    ("slow_link", "slow_link_suspected"),
    ("ep_imbalance", "ep_load_imbalance_suspected"),
    # a hot expert rank carrying most of the tokens, in inference and in training (forward and backward):
    # the twin routes the same tokens evenly; every MoE layer's combine waits for the hot rank's experts,
    # and its dispatch and combine move the hot rank's tokens
    ("ep_hot_prefill", "ep_load_imbalance_suspected"),
    ("ep_hot_training", "ep_load_imbalance_suspected"),
    ("exposed_aicpu", "aicpu_exposed"),
    # the twin launches the down projection on every cube core: the same work, a third of the time
    ("narrow_matmul", "block_dim_underuse"),
    # the twin runs the FFN's RmsNorm as the one fused kernel
    ("unfused_rmsnorm", "unfused_op_pattern"),
    # the twin runs the loss as the fused CrossEntropyLoss and its gradient, once a step
    ("eager_loss", "unfused_loss_chain"),
    # the twin runs the FFN's residual add as the one Add (its scales folded in)
    ("fusible_chain", "fusible_op_sequence"),
    # the twin takes the clipping norm as one kernel with no all-reduce: one 4-byte all-reduce's latency
    # (1 in 36) more than bucketing the norms into one all-reduce saves
    ("small_packets", "small_packet_collective"),
    # the twin's buckets transfer beside the backward as fast as alone
    ("contended_buckets", "bandwidth_contention"),
    # the twin's last bucket is 512-byte aligned: every slice of its all-reduce at the same rate
    ("misaligned_bucket", "sdma_misaligned"),
    # the twin's vision stem runs plain BatchNorm: the same kernels, no statistics collectives
    ("syncbn_vision", "syncbn"),
    # the twin's FFN is the model's width, its matmuls at the aligned speed (a few per thousand more FLOPs)
    ("unaligned_ffn", "operator_low_efficiency"),
    # the twin's send / recv deliver every packet the first time
    ("rdma_retransmission", "rdma_retransmission"),
    ("throttled_card", "aicore_freq_throttled"),
    ("launch_bound", "host_launch_bound"),  # the twin's launches are ahead of the device
    ("launch_blocking", "env_setting"),  # the twin runs without ASCEND_LAUNCH_BLOCKING: launches ahead
    ("host_stalls", "dataloader_stall"),  # every rank stalls: closed on all of them at once
    ("host_stalls", "gc_pause"),
    ("host_stalls", "allocation_heavy"),
    ("host_stalls", "dynamic_shape_recompile"),
    ("host_stalls", "memcpy_in_step"),
    # two faults at once: each finding is priced with the other fault still in place
    ("demo", "slow_rank_suspected"),
    ("demo", "device_idle_bubble"),
    ("mixed", "slow_rank_suspected"),
    ("mixed", "ep_load_imbalance_suspected"),
    # the twin of a stage imbalance is the balanced split (the last stage one layer fewer); the moved
    # layer takes its gradient sync and optimizer share along, the embedding and LM head stay
    ("pipeline_parallel", "pp_stage_imbalance"),
    # a rank launch-bound a tenth of its step: its peers wait for it in every all-reduce
    ("launch_bound_rank", "host_launch_bound"),
    # a rank whose data loader delays its step's first kernel: the stall is inside its step (the profiler's
    # step has started), and its peers wait for it in their gradient all-reduce
    ("slow_dataloader_rank", "dataloader_stall"),
    # the twin of an uncaptured straggler is the same capture of the same ranks, the straggler not slow
    ("uncaptured_straggler", "capture_incomplete_group"),
    # the twin of a gradient sync after the backward is the same training with its buckets overlapped
    ("exposed_grad_allreduce", "gradient_allreduce_exposed"),
    # ... and under a distributed optimizer (ZeRO-1), whose gradients reduce-scatter; its twin is zero_overlapped
    ("exposed_zero_sync", "gradient_allreduce_exposed"),
)
# a fault whose twin is not its absence: what takes its place
TWIN_REPLACEMENT = {"capture_incomplete_group": lambda fault: Fault("rank_not_captured", ranks=fault.ranks)}


def twin_of(name: str, finding_type: str) -> Scenario:
    """Scenario ``name`` without the fault that plants ``finding_type`` (or with what replaces it)."""
    planted = SCENARIOS[name]
    kept = tuple(f for f in planted.faults if f.kind != finding_type)
    if len(kept) != len(planted.faults) - 1:
        raise ValueError(f"scenario {name} plants no single {finding_type} fault")
    removed = [f for f in planted.faults if f.kind == finding_type]
    replaced = tuple(TWIN_REPLACEMENT[f.kind](f) for f in removed if f.kind in TWIN_REPLACEMENT)
    return replace(planted, name=f"{name}_twin", faults=kept + replaced)
