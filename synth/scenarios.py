"""Named scenarios and the faults they plant (each parameterised; several combine)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from npuprof.synth.faults import RDMA_TIMEOUT_US, STEP_TOP, Fault


@dataclass(frozen=True)
class Scenario:
    """A workload plus the faults planted into it."""

    name: str
    description: str
    model: str = "dense"  # dense | moe
    training: bool = True
    phase: str = "train"  # train | prefill | decode
    ranks: int = 4
    steps: int = 4
    layers: int = 4
    micro_batches: int = 2
    tokens: int = 4096
    pp: int = 1  # pipeline-parallel stages (training only)
    faults: tuple[Fault, ...] = field(default_factory=tuple)
    # planted changes for comparisons: (kernel Type, duration factor) on every rank, e.g. faster attention
    kernel_factors: tuple[tuple[str, float], ...] = ()
    wide_ffn_layers: tuple[int, ...] = ()  # a planted shape change: these dense layers' FFN is twice as wide
    # ZeRO-1 (Megatron's distributed optimizer): gradients reduce-scattered, parameters all-gathered
    distributed_optimizer: bool = False
    # the decoder layers' matmuls take their FLOPs at one speed, kernels.CALIBRATED_TFLOPS (the synthetic
    # card's aligned bf16 matmul), instead of each shape its own: an operator's speed against its siblings'
    calibrated: bool = False
    # the NPU the capture ran on, as its user names it to the analysis (--hardware-model): a torch_npu text
    # capture does not say; None: the card is not named
    card: str | None = None
    # the parallel groups whose ops cross machines, over RDMA (communication.json's RDMA transport); the
    # rest run over HCCS inside one machine
    rdma_groups: tuple[str, ...] = ()
    # a multimodal model's vision encoder: conv + BatchNorm + ReLU blocks ahead of the decoder (synth/vision.py)
    vision_blocks: int = 0
    # how a healthy router spreads the routed tokens in this capture: each rank's weight in its expert
    # group (empty: even); a hot rank's fault factor multiplies on top, the group's total stays the same
    routing_weights: tuple[float, ...] = ()


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("clean", "dense GQA training, data parallel, no fault planted"),
        Scenario(
            "pipeline_parallel",
            "dense training like the real Qwen3 sample: TP1 PP2 DP2, 2 micro-batches, batchSendRecv between "
            "stages; layers split 3 / 3, so the last stage (ranks 2, 3) also running the LM head and loss is "
            "the heavy one, and 2 micro-batches leave a third of the pipeline idle",
            pp=2,
            layers=6,
            faults=(Fault("pp_stage_imbalance", ranks=(2, 3), layer=3), Fault("pp_bubble_heavy")),
        ),
        Scenario(
            "pipeline_balanced",
            "the clean control of pipeline_parallel: TP1 PP2 DP2 with the layers split 4 / 2 (the last stage's "
            "LM head and loss weigh about a layer) and 8 micro-batches, so neither stage waits long for the other",
            pp=2,
            layers=6,
            micro_batches=8,
        ),
        Scenario(
            "rdma_retransmission",
            "pipeline_balanced with its two stages on two machines (the pipeline's send / recv over RDMA, "
            "HCCL_RDMA_TIMEOUT=14 recorded): step 11's first send / recv between ranks 1 and 3 loses a packet "
            "and waits one retransmission timeout, 67.1 ms",
            pp=2,
            layers=6,
            micro_batches=8,
            rdma_groups=("pp",),
            faults=(Fault("rdma_retransmission", ranks=(1, 3), steps=(1,), gap_us=RDMA_TIMEOUT_US),),
        ),
        Scenario(
            "clean_inference",
            "dense GQA prefill with tensor parallel all-reduces, no fault",
            training=False,
            phase="prefill",
            micro_batches=1,
        ),
        Scenario(
            "slow_rank",
            "dense training; rank 2 computes 1.6x slower, the others wait for it in every all-reduce",
            faults=(Fault("slow_rank_suspected", ranks=(2,), factor=1.6),),
        ),
        Scenario(
            "ep_imbalance",
            "MoE decode with expert parallel dispatch/combine; rank 1 receives 4x the routed tokens",
            model="moe",
            training=False,
            phase="decode",
            tokens=256,
            micro_batches=1,
            faults=(Fault("ep_load_imbalance_suspected", ranks=(1,), factor=4.0),),
        ),
        Scenario(
            "ep_hot_prefill",
            "MoE prefill with expert parallel dispatch/combine; the router sends rank 1 six times the tokens of "
            "each other rank (two thirds of all): every MoE layer's combine waits for its experts, and its "
            "dispatch and combine move most of the data",
            model="moe",
            training=False,
            phase="prefill",
            tokens=2048,
            micro_batches=1,
            faults=(Fault("ep_load_imbalance_suspected", ranks=(1,), factor=6.0),),
        ),
        Scenario(
            "ep_hot_training",
            "MoE training, data and expert parallel; rank 1's experts receive four times the tokens of each "
            "other rank's, in the forward's and the backward's all-to-alls alike",
            model="moe",
            tokens=2048,
            faults=(Fault("ep_load_imbalance_suspected", ranks=(1,), factor=4.0),),
        ),
        Scenario(
            "moe_balanced",
            "the clean control of ep_hot_training: MoE training whose router spreads the tokens evenly",
            model="moe",
            tokens=2048,
        ),
        Scenario(
            "moe_prefill_balanced",
            "the clean control of ep_hot_prefill: MoE prefill whose router spreads the tokens evenly",
            model="moe",
            training=False,
            phase="prefill",
            tokens=2048,
            micro_batches=1,
        ),
        Scenario(
            "host_bubble",
            "dense prefill; rank 0 idles 6 ms on the host before layer 2 in steps 11 and 12 (ordinals 1, 2)",
            training=False,
            phase="prefill",
            micro_batches=1,
            faults=(Fault("device_idle_bubble", ranks=(0,), steps=(1, 2), layer=2, gap_us=6000.0),),
        ),
        Scenario(
            "idle_capture",
            "dense prefill on 2 ranks whose steps 10 and 11 (ordinals 0, 1) idle 200 ms on the host before layer 1: "
            "the device is busy a few percent of them, a capture of an idle job (capture health: idle_capture, "
            "those two steps; its twin, without the stall, is a healthy capture)",
            training=False,
            phase="prefill",
            ranks=2,
            micro_batches=1,
            faults=(Fault("device_idle_bubble", ranks=(), steps=(0, 1), layer=1, gap_us=200_000.0),),
        ),
        Scenario(
            "host_stalls",
            "dense training, data parallel; every rank waits 3 ms for the dataloader before layer 0 in steps 11 "
            "and 13 (ordinals 1, 3), collects garbage for 2 ms before layer 2 in step 12 (ordinal 2), "
            "allocates device memory for 1.5 ms before layer 3 in every step, compiles an operator for "
            "2.5 ms (a shape it had not met) before layer 1 in steps 11 and 12, and copies 44 MB from the host "
            "for 2 ms on the device's stream before layer 2 in steps 10 and 13",
            faults=(
                Fault("dataloader_stall", steps=(1, 3), layer=0, gap_us=3000.0),
                Fault("gc_pause", steps=(2,), layer=2, gap_us=2000.0),
                Fault("allocation_heavy", layer=3, gap_us=1500.0),
                Fault("dynamic_shape_recompile", steps=(1, 2), layer=1, gap_us=2500.0),
                Fault("memcpy_in_step", steps=(0, 3), layer=2, gap_us=2000.0),
            ),
        ),
        Scenario(
            "launch_bound",
            "dense decode in eager mode with tensor parallel all-reduces: the host launches each compute "
            "kernel 25 us after the device could start it, so the device waits on launches all step long",
            training=False,
            phase="decode",
            tokens=64,
            micro_batches=1,
            faults=(Fault("host_launch_bound", gap_us=25.0),),
        ),
        Scenario(
            "slow_dataloader_rank",
            "dense training, data parallel; rank 1's data loader hands over each batch 1.5 ms late, at the top "
            "of every step before its first kernel (the profiler's step has started, the device has nothing to "
            "run), and the other ranks wait for it in their gradient all-reduce",
            faults=(Fault("dataloader_stall", ranks=(1,), layer=STEP_TOP, gap_us=1500.0),),
        ),
        Scenario(
            "launch_bound_rank",
            "dense training, data parallel; rank 1's host launches each compute kernel 15 us after its device "
            "could start it (about a tenth of its step), and the other ranks wait for it in every all-reduce",
            faults=(Fault("host_launch_bound", ranks=(1,), gap_us=15.0),),
        ),
        Scenario(
            "slow_link",
            "dense prefill with TP all-reduces; the 0-1 link runs at a quarter of its bandwidth",
            training=False,
            phase="prefill",
            micro_batches=1,
            faults=(Fault("slow_link_suspected", link=(0, 1), factor=4.0),),
        ),
        Scenario(
            "exposed_aicpu",
            "dense prefill; an AI CPU op (400 us) runs exposed inside layer 1 on every step",
            training=False,
            phase="prefill",
            micro_batches=1,
            faults=(Fault("aicpu_exposed", layer=1, gap_us=400.0),),
        ),
        Scenario(
            "narrow_matmul",
            "dense prefill; every layer's FFN down projection is launched on a third of the cube cores",
            training=False,
            phase="prefill",
            micro_batches=1,
            faults=(Fault("block_dim_underuse", factor=3.0),),
        ),
        Scenario(
            "unaligned_ffn",
            "dense prefill; every layer's FFN is 4 columns short of the model's width, off the cube's 16 x 16 "
            "fractal: its gate-up and down projections run at 0.4 of the aligned speed",
            training=False,
            phase="prefill",
            micro_batches=1,
            calibrated=True,
            card="Ascend910B1",
            faults=(Fault("operator_low_efficiency"),),
        ),
        Scenario(
            "unfused_rmsnorm",
            "dense prefill; every layer's FFN RmsNorm runs as six kernels (pow, mean, add, rsqrt, mul, mul)",
            training=False,
            phase="prefill",
            micro_batches=1,
            faults=(Fault("unfused_op_pattern"),),
        ),
        Scenario(
            "launch_blocking",
            "dense decode run with ASCEND_LAUNCH_BLOCKING=1 recorded: every compute kernel's launch waits for "
            "the one before to finish, 25 us after the device could start it",
            training=False,
            phase="decode",
            ranks=2,
            tokens=64,
            micro_batches=1,
            faults=(Fault("env_setting", gap_us=25.0),),
        ),
        Scenario(
            "small_packets",
            "dense training; gradient clipping all-reduces each parameter tensor's norm on its own over the "
            "data-parallel group: 36 four-byte all-reduces back to back before the optimizer",
            faults=(Fault("small_packet_collective"),),
        ),
        Scenario(
            "contended_buckets",
            "dense training; the gradient buckets' all-reduces that run beside the backward transfer 2.5x as "
            "long as the last one, alone: the backward's kernels take their share of the memory bandwidth",
            faults=(Fault("bandwidth_contention", factor=2.5),),
        ),
        Scenario(
            "misaligned_bucket",
            "dense training; the last gradient bucket (the embedding's) is cut at a size that is not 512-byte "
            "aligned, so one slice of its all-reduce moves at a third of its aligned siblings' rate and the "
            "optimizer waits for it",
            faults=(Fault("sdma_misaligned", factor=3.0),),
        ),
        Scenario(
            "syncbn_vision",
            "multimodal training: a vision encoder's stem of 4 conv + BatchNorm + ReLU blocks ahead of the decoder, "
            "converted to SyncBatchNorm: every BatchNorm gathers its batch statistics over data parallel in a "
            "blocking all-gather (and all-reduces its gradient sums in the backward), 16 small collectives per step",
            vision_blocks=4,
            faults=(Fault("syncbn"),),
        ),
        Scenario(
            "fusible_chain",
            "dense prefill; every layer's two residual adds run as three memory-bound kernels each (muls, add, muls)",
            training=False,
            phase="prefill",
            micro_batches=1,
            faults=(Fault("fusible_op_sequence"),),
        ),
        Scenario(
            "dummy_rank",
            "MoE decode; rank 3 gets no routed tokens (reduced-work rank)",
            model="moe",
            training=False,
            phase="decode",
            tokens=256,
            micro_batches=1,
            faults=(Fault("reduced_work_or_dummy_rank", ranks=(3,)),),
        ),
        Scenario(
            "throttled_card",
            "dense training, data parallel; rank 1's AI Core clock drops to 1,200 MHz (nominal 1,800) in steps "
            "11-13 (ordinals 1-3), so its kernels run 1.5x longer and the others wait for it",
            faults=(Fault("aicore_freq_throttled", ranks=(1,), steps=(1, 2, 3), factor=1.5),),
        ),
        Scenario(
            "uncaptured_straggler",
            "dense training, data parallel; rank 3 computes 1.5x slower and is not in the capture: ranks 0-2 "
            "wait for it in every all-reduce, and only its group's member count says someone is missing",
            faults=(Fault("capture_incomplete_group", ranks=(3,), factor=1.5),),
        ),
        Scenario(
            "uncaptured_peer",
            "the twin of uncaptured_straggler: rank 3 is not in the capture, and computes like the others",
            faults=(Fault("rank_not_captured", ranks=(3,)),),
        ),
        Scenario(
            "exposed_grad_allreduce",
            "dense training, data parallel; the gradient all-reduce runs after the whole backward in 4 buckets, "
            "none overlapped (its twin, clean, overlaps all but the last bucket with the backward)",
            faults=(Fault("gradient_allreduce_exposed"),),
        ),
        Scenario(
            "warmup",
            "dense training, data parallel; the capture's first step opens with a 12 ms broadcast of the "
            "parameters over data parallel (DDP's start-up broadcast), a one-time cost the other steps do not pay",
            faults=(Fault("warmup_step", steps=(0,), gap_us=12_000.0),),
        ),
        Scenario(
            "eager_loss",
            "dense training, data parallel, one micro-batch a step; the loss runs as an eager fp32 cross-entropy "
            "over the logits (cast, max, sub, exp, sum, div, gather; scatter, mul, cast) where its twin runs the "
            "fused CrossEntropyLoss and CrossEntropyLossGrad",
            micro_batches=1,
            faults=(Fault("unfused_loss_chain"),),
        ),
        Scenario(
            "exposed_zero_sync",
            "dense training, data parallel, with a distributed optimizer (ZeRO-1) like the real Qwen3 sample: "
            "gradients reduce-scatter in 4 buckets after the whole backward, none overlapped, and the updated "
            "parameters all-gather after the optimizer (its twin, zero_overlapped, overlaps all but the last "
            "reduce-scatter with the backward and gathers the parameters under the next forward)",
            distributed_optimizer=True,
            faults=(Fault("gradient_allreduce_exposed"),),
        ),
        Scenario(
            "zero_overlapped",
            "the clean control of exposed_zero_sync: a distributed optimizer whose gradient reduce-scatters run "
            "under the backward, all but the last bucket, and whose parameter all-gathers run under the next "
            "forward (--overlap-param-gather)",
            distributed_optimizer=True,
        ),
        Scenario(
            "partial_capture",
            "dense training whose capture starts and stops inside a step",
            steps=5,
            faults=(Fault("partial_capture"),),
        ),
        Scenario(
            "demo",
            "dense prefill on 4 ranks (TP all-reduces): rank 2 computes 1.5x slower, "
            "and rank 0 idles 5 ms on the host before layer 2 in step 11 (ordinal 1)",
            training=False,
            phase="prefill",
            micro_batches=1,
            steps=4,
            layers=6,
            faults=(
                Fault("slow_rank_suspected", ranks=(2,), factor=1.5),
                Fault("device_idle_bubble", ranks=(0,), steps=(1,), layer=2, gap_us=5000.0),
            ),
        ),
        Scenario(
            "mixed",
            "MoE training: a slow rank, a hot EP rank and a clock offset on another rank",
            model="moe",
            tokens=2048,
            faults=(
                Fault("slow_rank_suspected", ranks=(3,), factor=1.5),
                Fault("ep_load_imbalance_suspected", ranks=(1,), factor=3.0),
                Fault("clock_offset", ranks=(2,), offset_us=2500.0),
            ),
        ),
    )
}


def scenario(name: str, **overrides) -> Scenario:
    """A named scenario with CLI overrides (ranks, steps, layers, ...) applied; faults stay in range."""
    if name not in SCENARIOS:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    chosen = replace(SCENARIOS[name], **{k: v for k, v in overrides.items() if v is not None})
    for fault in chosen.faults:
        bad = [
            r for r in (*fault.ranks, *(fault.link if fault.kind == "slow_link_suspected" else ())) if r >= chosen.ranks
        ]
        if bad:
            raise ValueError(
                f"scenario {name}: fault {fault.kind} needs rank {max(bad)}, but only {chosen.ranks} ranks"
            )
        if (
            fault.kind in ("device_idle_bubble", "aicpu_exposed", "dataloader_stall", "gc_pause", "allocation_heavy")
            and fault.layer >= chosen.layers
        ):
            raise ValueError(
                f"scenario {name}: fault {fault.kind} targets layer {fault.layer}, but only {chosen.layers} layers"
            )
        if any(s >= chosen.steps for s in fault.steps):
            raise ValueError(
                f"scenario {name}: fault {fault.kind} targets step {max(fault.steps)}, but only {chosen.steps} steps"
            )
    if chosen.pp > 1 and (not chosen.training or chosen.ranks % chosen.pp or chosen.layers % chosen.pp):
        raise ValueError(
            f"scenario {name}: pipeline parallel needs training, ranks and layers divisible by pp={chosen.pp}"
        )
    for fault in chosen.faults:
        if fault.kind == "pp_bubble_heavy" and (chosen.pp - 1) / (chosen.micro_batches + chosen.pp - 1) < 0.2:
            raise ValueError(
                f"scenario {name}: {chosen.micro_batches} micro-batches over {chosen.pp} stages are not few"
            )
        if fault.kind == "pp_stage_imbalance" and (chosen.pp < 2 or not 0 < fault.layer < chosen.layers):
            raise ValueError(
                f"scenario {name}: pp_stage_layers needs pipeline parallel and 0 < layer < {chosen.layers}"
            )
    if any(f.kind == "partial_capture" for f in chosen.faults) and chosen.steps < 3:
        raise ValueError(f"scenario {name}: partial_capture needs at least 3 steps")
    return chosen
