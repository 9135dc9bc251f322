"""What one synthetic step is made of: the model's sizes, the workload of one rank, and the program of
kernels it runs with the ground truth of what each event belongs to."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from npuprof.synth.kernels import Kernel

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
    # a communication op the rank issues on its communication stream and does not wait for (a gradient
    # bucket's all-reduce during the backward), and the event that waits for every such op issued before it
    overlapped: list[bool] = field(default_factory=list)
    joins: list[bool] = field(default_factory=list)
    _index: dict = field(default_factory=dict)

    def add(
        self,
        kernel: Kernel,
        region: str,
        layer: int = -1,
        role: str = "none",
        micro_batch: int = 0,
        block: str = "",
        overlapped: bool = False,
        joins: bool = False,
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
        self.overlapped.append(overlapped)
        self.joins.append(joins)

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "kernel_id": np.asarray(self.kernel_ids, dtype=np.int32),
            "region": np.asarray(self.region, dtype=object),
            "layer_index": np.asarray(self.layer_index, dtype=np.int32),
            "layer_role": np.asarray(self.layer_role, dtype=object),
            "micro_batch": np.asarray(self.micro_batch, dtype=np.int32),
            "block": np.asarray(self.block, dtype=object),
            "gap_before_us": np.asarray(self.gap_before_us, dtype=np.float64),
            "overlapped": np.asarray(self.overlapped, dtype=bool),
            "joins": np.asarray(self.joins, dtype=bool),
        }


@dataclass(frozen=True)
class Workload:
    """What one step computes: tokens, training or not, and per-rank load factors."""

    model: ModelSpec
    training: bool
    phase: str  # prefill | decode | mixed | train
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
    last_stage_layers: int | None = None  # decoder layers of the last pipeline stage; None: a balanced split
    overlap_gradients: bool = False  # gradient buckets all-reduce during the backward (DDP), not after it
    # a distributed optimizer (ZeRO-1, Megatron's): buckets reduce-scatter the gradients, each rank updates
    # its shard of the parameters, and the updated shards are all-gathered after the update
    distributed_optimizer: bool = False
    # matmuls sized from their FLOPs at one speed (kernels.CALIBRATED_TFLOPS) rather than each its own
    calibrated: bool = False
    vision_blocks: int = 0  # a vision encoder's conv + BatchNorm + ReLU blocks ahead of the decoder (synth/vision.py)
    # the faults planted on this rank that change its kernels (synth/faults/): a builder names the piece a
    # fault may replace (``faults.piece``); the faults older than pieces are still asked ``planted(kind)``
    faults: tuple = ()
    requests: int = 0  # a serving forward's requests (B; synth/serving.py): 0 = not a serving forward
    # a DP rank without requests runs a dummy forward to keep its expert exchanges in step with the others:
    # the model's layers on padding tokens, no LM head and no sampling (vLLM's _dummy_run)
    dummy: bool = False
    sampled: int = 0  # the requests its LM head and sampling run on, where the layers ran padded (0: requests)

    def planted(self, kind: str) -> list:
        """The faults of ``kind`` planted on this rank."""
        return [fault for fault in self.faults if fault.kind == kind]

    @property
    def stage_layers(self) -> range:
        """The decoder layers this pipeline stage holds: the last stage ``last_stage_layers``, the rest
        split evenly over the other stages (the first takes any remainder). Balanced by default: the last
        stage's LM head and loss weigh about a layer, so it holds one layer fewer than an even split (what
        Megatron's uneven split options are for)."""
        if self.pp_size == 1:
            return range(self.layers)
        even = self.layers // self.pp_size
        last = max(even - 1, 1) if self.last_stage_layers is None else self.last_stage_layers
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
