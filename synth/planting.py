"""What synth plants, as data: a ``Scenario`` (a workload and the faults planted into it), a ``Fault`` (one
planted instance) and a ``FaultType`` (a kind of fault: its parameters, what it means, what its ground truth
says, how its twin differs, the pieces of the capture model it replaces).

Fault types register themselves from ``synth/faults/<topic>.py``, one module per detector topic as
detectors do (``register``), with the scenarios that plant them and the twins the tests price them by.
This module holds no fault of its own, so a fault module and the writers can both import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from npuprof.synth.kernels import Kernel
    from npuprof.synth.program import Workload

# one RDMA retransmission timeout at HCCL_RDMA_TIMEOUT=14: 4.096 µs × 2^14 (the QP's local ACK timeout)
RDMA_TIMEOUT_EXPONENT = 14
RDMA_TIMEOUT_US = 4.096 * 2**RDMA_TIMEOUT_EXPONENT
STEP_TOP = -1  # a host stall's layer: at the top of the step, inside ProfilerStep#N before its first kernel


@dataclass(frozen=True)
class Fault:
    """One planted fault. Which fields matter depends on ``kind``: the type of the finding it plants (one
    vocabulary for synth, ground truth, tests and the detectors), or a capture condition that no finding
    reports (partial_capture, clock_offset; segment and cross_rank measure them). Each kind's
    ``FaultType.doc`` (synth/faults/) says what it does with them."""

    kind: str
    ranks: tuple[int, ...] = ()
    steps: tuple[int, ...] = ()  # step ordinals (0-based); empty = every step
    factor: float = 1.0
    layer: int = 0
    gap_us: float = 0.0
    link: tuple[int, int] = (0, 1)
    offset_us: float = 0.0

    def as_dict(self) -> dict:
        """The fault as ground_truth.json records it: its kind and the parameters its type names."""
        base = {"kind": self.kind}
        keys = _TYPES[self.kind].parameters
        found = {k: list(getattr(self, k)) if isinstance(getattr(self, k), tuple) else getattr(self, k) for k in keys}
        if "steps" in found:  # ordinals, labelled as such: texts and findings number steps by captured id
            found["step_ordinals"] = found.pop("steps")
        return {**base, **found}


@dataclass(frozen=True)
class Forward:
    """One model forward of a serving capture (vLLM-Ascend's execute_model): its batch's kind, the tokens
    it computes (T) and the requests they belong to (B). ``prefill``: every request's whole prompt,
    attention over the fresh keys and values; ``decode``: one token per request (T = B) over the paged
    KV cache; ``mixed``: a chunked-prefill batch, prompt chunks beside decodes, over the paged cache."""

    phase: str  # prefill | decode | mixed
    tokens: int
    requests: int
    # how it ran: eager (a launch per kernel), full (one replay of a captured ACL graph of the whole
    # forward) or piecewise (graph pieces between the layers' attention, which runs eager)
    graph: str = "eager"
    # the data-parallel ranks without a request in it: each runs a dummy forward of as many tokens, one per
    # padding request (vLLM's _dummy_run), so its expert exchanges stay in step with the ranks that serve
    dummy_ranks: tuple[int, ...] = ()
    # the batch size a full graph was captured for, which the forward's layers run padded to (0: no padding);
    # the LM head and sampling after the replay run eager on the real requests
    graph_tokens: int = 0


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
    # a serving capture: the forward each step runs, one per step (``steps`` is their count); empty: every
    # step runs the scenario's own phase and tokens
    forwards: tuple[Forward, ...] = ()
    # the capture marks its steps (ProfilerStep, Step Id); False: a serving capture without them, as
    # vLLM-Ascend's /start_profile leaves it, each step one forward (``generate``'s ``serving`` default)
    step_marks: bool = True


# a piece of the capture model a fault replaces: (the rank's workload, the fault, the neutral piece's
# kernels) -> the kernels that run in its place (synth/faults/__init__.py: ``piece``)
PieceEdit = Callable[["Workload", Fault, list["Kernel"]], list["Kernel"]]


@dataclass(frozen=True)
class FaultType:
    """A kind of fault synth plants: the finding type it plants (or a capture condition's name), the
    ``Fault`` fields its ground truth records, what it does (``doc``), and what else it means."""

    kind: str
    parameters: tuple[str, ...]
    doc: str
    # finding types it plants besides its own, on every rank it hits / only when it hits some ranks
    also_reported: tuple[str, ...] = ()
    also_reported_on_some_ranks: tuple[str, ...] = ()
    condition: bool = False  # a capture condition: no finding reports it (segment and cross_rank measure it)
    uncaptured: bool = False  # its ranks are left out of the capture
    # what takes its place in its twin (None: nothing, the twin is the scenario without it)
    twin_replacement: Callable[[Fault], Fault] | None = None
    # why a scenario cannot plant it as written (None: it can), beyond the ranks, layer and steps in range
    check: Callable[[Scenario, Fault], str | None] | None = None
    # the pieces of the capture model it replaces, by the name the model builds them under
    pieces: dict[str, PieceEdit] = field(default_factory=dict)
    # what torch_npu records of the environment on the ranks it hits (profiler_metadata.json ENV_VARIABLES)
    environment: dict[str, str] = field(default_factory=dict)
    topic: str = ""  # the fault module that registered it (a detector topic, or "capture")

    def findings(self, fault: Fault) -> tuple[str, ...]:
        """The finding types ``fault`` of this type plants (none for a capture condition)."""
        if self.condition:
            return ()
        extra = self.also_reported_on_some_ranks if fault.ranks else ()
        return (self.kind, *self.also_reported, *extra)


_TYPES: dict[str, FaultType] = {}
_SCENARIOS: dict[str, Scenario] = {}
_TWINS: list[tuple[str, str]] = []


def register(fault_type: FaultType, scenarios: tuple[Scenario, ...] = (), twins: tuple[str, ...] = ()) -> None:
    """Register ``fault_type`` (from its module in synth/faults/, which names its topic), with the
    ``scenarios`` that plant it (each registered once, by one of the types it plants) and the scenarios
    whose ``twins`` without it price its finding."""
    if fault_type.kind in _TYPES:
        raise ValueError(f"fault type {fault_type.kind} registered twice")
    _TYPES[fault_type.kind] = fault_type
    for planted in scenarios:
        if planted.name in _SCENARIOS:
            raise ValueError(f"scenario {planted.name} registered twice")
        _SCENARIOS[planted.name] = planted
    _TWINS.extend((name, fault_type.kind) for name in twins)
