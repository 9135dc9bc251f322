"""Simulate the device timeline of every rank: sequential kernels, communication that synchronises.

Physics: on each rank kernels run one after another with small launch gaps. A collective (or a
pipeline send/recv) starts on a rank when that rank arrives; it ends at (about) the same moment on
every member of its communicator — when the last member has arrived plus the transfer time — so
the waiting falls on the ranks that arrived early. Planted faults change durations, gaps,
transfers or clocks; nothing else differs. Ranks may run different programs (pipeline stages):
each communication op is matched across its members by (communicator, sequence number).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from npuprof.synth.comm_faults import (
    contended_transfer,
    misaligned_transit,
    retransmission_wait,
    slow_link_factor,
)
from npuprof.synth.faults import STEP_TOP, Fault
from npuprof.synth.groups import GroupInstance, Topology
from npuprof.synth.host_side import PLANTED_GAPS
from npuprof.synth.kernels import Kernel
from npuprof.synth.launch_waits import forward_waits, forwards_as_run, launch_waits
from npuprof.synth.models import build_step
from npuprof.synth.program import DENSE, LAYER, MOE, Workload
from npuprof.synth.program_edits import warm_up_placeholders, with_exposed_aicpu, with_warmup_broadcast
from npuprof.synth.scenarios import Scenario
from npuprof.synth.serving_kernels import as_run

STEP_PREP_US = 350.0  # host work between steps (the optimizer's bookkeeping, sampling, the next batch)
# ... of which this much falls inside the next step: the host enters ProfilerStep#N and launches its
# first kernel at once, which starts a launch lead later (the rest ends the previous iteration)
STEP_HEAD_US = 40.0
HOST_LEAD_NS = 35_000  # the host launches a kernel ~35 µs before the device starts it
STARVED_LEAD_NS = 2_000  # ... and only just before it where the device waits for the launch
DEVICE_GAP_US = (1.5, 6.0)  # the device's own gap before a kernel: uniform between these
NOMINAL_AICORE_MHZ = 1800.0  # the AI Core clock every synthetic card runs at unless throttled
BASE_CLOCK_NS = 1_764_246_877_000_000_000  # a 2025-11 wall clock, like the real samples


@dataclass
class RankTimeline:
    """Every event of one rank, in rank-clock ns, with its ground-truth annotations."""

    rank: int
    kernels: list[Kernel]
    kernel_id: np.ndarray
    start_ns: np.ndarray
    duration_ns: np.ndarray
    wait_ns: np.ndarray
    step: np.ndarray  # step ordinal
    region: np.ndarray
    layer_index: np.ndarray
    layer_role: np.ndarray
    micro_batch: np.ndarray
    block: np.ndarray
    collective: np.ndarray  # ordinal of the communication op, -1 for compute
    step_start_ns: np.ndarray
    step_end_ns: np.ndarray
    layers_held: tuple[int, ...] = ()
    clock_offset_ns: int = 0
    clock_factor: np.ndarray | None = None  # per event: nominal clock ÷ the clock it ran at (1 = nominal)
    launch_lead_ns: np.ndarray | None = None  # per event: device start - its host launch
    overlapped: np.ndarray | None = None  # per event: a communication op its rank did not wait for
    aicore_freq: list[tuple[int, float]] = field(default_factory=list)  # (ns, MHz) samples, rank clock


@dataclass
class Collective:
    """One communication op instance, matched across the members of its communicator."""

    ordinal: int
    kernel: Kernel
    step: int
    group: GroupInstance
    sequence: int  # per-communicator sequence number (names hcom ops)
    arrive_ns: dict[int, int]  # per member, true time
    end_ns: dict[int, int]
    transfer_ns: float

    @property
    def last_arrival_ns(self) -> int:
        return max(self.arrive_ns.values())


def _faults(scenario: Scenario, kind: str) -> list[Fault]:
    return [f for f in scenario.faults if f.kind == kind]


def _tokens_factor(scenario: Scenario, rank: int, topology: Topology) -> float:
    """The share of its expert group's routed tokens ``rank`` receives, over an even share: a hot rank
    gets ``factor`` × what each other member gets, the group's total unchanged (the router sends the same
    tokens, unevenly), so its balanced twin does the same work evenly spread; ``routing_weights`` are a
    healthy router's own unevenness, varying from capture to capture."""
    hot = _faults(scenario, "ep_load_imbalance_suspected")
    if not (hot or scenario.routing_weights) or scenario.model != "moe":
        return 1.0
    members = topology.instance("exp", rank).members
    routing = dict(enumerate(scenario.routing_weights))
    hot_factor = {m: float(np.prod([f.factor for f in hot if m in f.ranks] or [1.0])) for m in members}
    weight = {m: routing.get(m, 1.0) * hot_factor[m] for m in members}
    return weight[rank] * len(members) / sum(weight.values())


def _workload(scenario: Scenario, rank: int, topology: Topology) -> Workload:
    """What every step of ``rank`` computes (a serving scenario's forwards change its phase and tokens)."""
    tokens_factor = _tokens_factor(scenario, rank, topology)
    reduced = any(rank in f.ranks for f in _faults(scenario, "reduced_work_or_dummy_rank"))
    return Workload(
        DENSE if scenario.model == "dense" else MOE,
        scenario.training,
        scenario.phase,
        scenario.tokens,
        scenario.layers,
        scenario.micro_batches,
        topology.dp * topology.tp,
        tokens_factor,
        reduced,
        topology.stage_of(rank),
        topology.pp,
        topology.tp,
        scenario.wide_ffn_layers,
        next((f.layer for f in _faults(scenario, "pp_stage_imbalance")), None),
        overlap_gradients=scenario.training and not _faults(scenario, "gradient_allreduce_exposed"),
        distributed_optimizer=scenario.distributed_optimizer,
        calibrated=scenario.calibrated,
        vision_blocks=scenario.vision_blocks,
        faults=tuple(f for f in scenario.faults if rank in f.ranks or not f.ranks),
    )


@dataclass
class _RankPlan:
    rank: int
    kernels: list[Kernel]
    arrays: dict[str, np.ndarray]  # per event of every step: the programs' ground truth
    kernel_id: np.ndarray  # all steps
    dur_us: np.ndarray
    gap_us: np.ndarray
    comm_pos: np.ndarray  # indices of communication events
    comm_group: list[GroupInstance]
    step_of: np.ndarray  # per event: its step ordinal
    firsts: np.ndarray  # per step: its first event
    clock_factor: np.ndarray
    starved: np.ndarray  # per event: the device waits for its launch (host_launch_bound)
    overlapped: np.ndarray  # per event: a communication op the rank does not wait for
    join_pos: np.ndarray  # indices of the events that wait for every overlapped op issued before them
    head_us: np.ndarray  # per step: the host stall between the step's start and its first kernel
    dropped: np.ndarray  # per event: a placeholder that runs as nothing and is not written (program_edits)


def _step_program(scenario: Scenario, workload: Workload) -> tuple[list[Kernel], dict[str, np.ndarray]]:
    """One step's kernels and per-event arrays, with the planted edits of every step (program_edits)."""
    program = build_step(workload)
    return program.kernels, with_warmup_broadcast(program, with_exposed_aicpu(program, scenario), scenario)


def _steps(scenario: Scenario, rank: int, topology: Topology) -> tuple[list[Kernel], dict[str, np.ndarray], np.ndarray]:
    """Every step's events of ``rank``: (the kernels, per-event arrays over every step, each event's step
    ordinal). One program tiled over the steps, or a serving scenario's forwards each its own."""
    workload = _workload(scenario, rank, topology)
    if not scenario.forwards:
        kernels, arrays = _step_program(scenario, workload)
        n_step = len(arrays["kernel_id"])
        step_of = np.repeat(np.arange(scenario.steps, dtype=np.int32), n_step)
        return kernels, {name: np.tile(values, scenario.steps) for name, values in arrays.items()}, step_of
    kernels: dict[Kernel, int] = {}  # one table for every forward's kernels
    parts = []
    for forward in forwards_as_run(scenario, rank):
        dummy = rank in forward.dummy_ranks
        # a full graph runs its layers on the captured batch size, one padding request per padding token
        tokens = forward.graph_tokens or forward.tokens
        phase, requests = ("decode", tokens) if dummy else (forward.phase, forward.requests + tokens - forward.tokens)
        own, arrays = _step_program(
            scenario,
            replace(workload, phase=phase, tokens=tokens, requests=requests, dummy=dummy, sampled=forward.requests),
        )
        ran = as_run(forward, own, arrays)
        parts.append({**arrays, "kernel_id": np.array([kernels.setdefault(k, len(kernels)) for k in ran], np.int32)})
    step_of = np.repeat(np.arange(len(parts), dtype=np.int32), [len(part["kernel_id"]) for part in parts])
    return list(kernels), {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}, step_of


def _plan(scenario: Scenario, rank: int, topology: Topology, seed: int) -> _RankPlan:
    S = scenario.steps
    kernels, arrays, step_of = _steps(scenario, rank, topology)
    kid = arrays["kernel_id"]
    n = len(kid)
    firsts = np.flatnonzero(np.diff(step_of, prepend=-1))
    rng = np.random.default_rng([seed, rank])
    dropped = warm_up_placeholders(scenario, step_of, np.arange(n) - firsts[step_of])
    is_comm = np.array([k.hccl_group is not None for k in kernels])[kid] & ~dropped
    slowed = [*_faults(scenario, "slow_rank_suspected"), *_faults(scenario, "capture_incomplete_group")]
    slow = np.prod([f.factor for f in slowed if rank in f.ranks] or [1.0])
    changed = dict(scenario.kernel_factors)
    base_us = np.array([k.base_us * (1.0 if k.hccl_group else changed.get(k.type, 1.0)) for k in kernels])
    clock_factor = _clock_factor(scenario, rank, step_of, is_comm)
    dur = base_us[kid] * rng.lognormal(0.0, 0.03, n) * np.where(is_comm, 1.0, slow) * clock_factor
    gap = rng.uniform(*DEVICE_GAP_US, n) + arrays["gap_before_us"]
    gap[firsts] += 0.0 if scenario.forwards else STEP_PREP_US  # a serving capture's forwards: forward_waits
    forward_waits(scenario, rank, firsts, gap)
    head_us = np.zeros(S)  # per step: the host stall at its top, before its first kernel
    for fault in [f for f in scenario.faults if f.kind in PLANTED_GAPS]:
        in_layer = (arrays["region"] == LAYER) & (arrays["layer_index"] == fault.layer)
        if rank not in fault.ranks and fault.ranks:
            continue
        for s in fault.steps or range(S):
            rows = firsts[s : s + 1] if fault.layer == STEP_TOP else np.flatnonzero(in_layer & (step_of == s))
            if rows.size:
                gap[rows[0]] += fault.gap_us
                head_us[s] += fault.gap_us if fault.layer == STEP_TOP else 0.0
    starved = launch_waits(scenario, rank, step_of, is_comm, gap)
    dur[dropped], gap[np.flatnonzero(dropped) + 1] = 0.0, 0.0  # the step's first kernel starts in its place
    comm_pos = np.flatnonzero(is_comm)
    groups = [topology.instance(kernels[k].hccl_group, rank) for k in kid[comm_pos]]
    overlapped = arrays["overlapped"].copy()
    join_pos = np.flatnonzero(arrays["joins"])
    return _RankPlan(
        rank,
        kernels,
        arrays,
        kid,
        dur,
        gap,
        comm_pos,
        groups,
        step_of,
        firsts,
        clock_factor,
        starved,
        overlapped,
        join_pos,
        head_us,
        dropped,
    )


def _clock_factor(scenario: Scenario, rank: int, step: np.ndarray, is_comm: np.ndarray) -> np.ndarray:
    """Per event (``step``: its step ordinal): how much longer it runs for its cycles (throttled compute
    on throttled steps)."""
    factor = np.ones(len(is_comm))
    for fault in _faults(scenario, "aicore_freq_throttled"):
        if rank in fault.ranks:
            factor[np.isin(step, fault.steps or range(scenario.steps)) & ~is_comm] *= fault.factor
    return factor


def _freq_samples(scenario: Scenario, rank: int, step_start_ns: np.ndarray, step_end_ns: np.ndarray) -> list:
    """(ns, MHz) AI Core clock samples: nominal from the capture start, each throttled step at
    nominal ÷ factor from its start, nominal again from its end."""
    samples = [(int(step_start_ns[0]) - 1000, NOMINAL_AICORE_MHZ)]
    for fault in _faults(scenario, "aicore_freq_throttled"):
        if rank in fault.ranks:
            for step in fault.steps or range(scenario.steps):
                samples.append((int(step_start_ns[step]), NOMINAL_AICORE_MHZ / fault.factor))
                samples.append((int(step_end_ns[step]) + 1, NOMINAL_AICORE_MHZ))
    return sorted(samples)


class _Simulation:
    """The event-by-event simulation of every rank: compute runs up to the next communication op, which
    completes when its last member has arrived (plus the transfer). An overlapped op (a gradient bucket)
    does not stop the rank: it runs on the rank's communication stream, one after another, and the
    rank's next join event waits until every overlapped op it issued has ended."""

    def __init__(self, scenario: Scenario, plans: list[_RankPlan], seed: int) -> None:
        self.scenario = scenario
        self.plans = plans
        self.start_us = [np.zeros(len(p.kernel_id)) for p in plans]
        self.ordinal_at = [np.full(len(p.kernel_id), -1, dtype=np.int64) for p in plans]
        self.clock = np.zeros(len(plans))  # end of the last event on each rank
        self.cursor = [0] * len(plans)  # next event to place
        self.next_comm = [0] * len(plans)  # index into comm_pos
        self.next_join = [0] * len(plans)  # index into join_pos
        # (communicator key, sequence) -> member -> (arrival µs, index into the member's comm_pos)
        self.waiting: dict[tuple[str, int], dict[int, tuple[float, int]]] = {}
        self.sequence: dict[tuple[str, int], int] = {}  # (communicator key, rank) -> ops issued so far
        self.pending = [0] * len(plans)  # overlapped ops issued and not yet ended, per rank
        self.stream_free = np.zeros(len(plans))  # when each rank's communication stream is free again
        self.blocked_at_join = [False] * len(plans)
        self.collectives: list[Collective] = []
        self.retransmitted: set[int] = set()  # steps whose planted RDMA retransmission has happened
        self.rng = np.random.default_rng([seed, 10_000])

    def run(self) -> None:
        """Place every event of every rank."""
        for r in range(len(self.plans)):
            self._run_until_comm(r)
        while self.waiting:
            ready = [key for key, arrived in self.waiting.items() if len(arrived) == len(self._group(arrived).members)]
            if not ready:
                raise RuntimeError(f"synthetic programs deadlock: {len(self.waiting)} communication ops never complete")
            for key in sorted(ready, key=lambda k: min(a for a, _ in self.waiting[k].values())):
                arrived = self.waiting.pop(key)
                for m in self._complete(key, arrived):
                    self._run_until_comm(m)

    def _group(self, arrived: dict[int, tuple[float, int]]) -> GroupInstance:
        member, (_, comm_index) = next(iter(arrived.items()))
        return self.plans[member].comm_group[comm_index]

    def _place_compute(self, r: int, stop: int) -> None:
        plan, lo = self.plans[r], self.cursor[r]
        if stop > lo:
            inc = plan.gap_us[lo:stop] + plan.dur_us[lo:stop]
            ends = self.clock[r] + np.cumsum(inc)
            self.start_us[r][lo:stop] = ends - plan.dur_us[lo:stop]
            self.clock[r] = ends[-1]
        self.cursor[r] = stop

    def _run_until_comm(self, r: int) -> None:
        """Place rank r's compute events up to its next blocking communication op (registering its arrival)
        or a join it must wait at; overlapped ops on the way are issued without stopping."""
        plan, n = self.plans[r], len(self.plans[r].kernel_id)
        while True:
            comm = plan.comm_pos[self.next_comm[r]] if self.next_comm[r] < len(plan.comm_pos) else n
            join = plan.join_pos[self.next_join[r]] if self.next_join[r] < len(plan.join_pos) else n
            self._place_compute(r, min(comm, join))
            if min(comm, join) == n:
                return
            if join < comm:
                if self.pending[r]:
                    self.blocked_at_join[r] = True
                    return
                self.clock[r] = max(self.clock[r], self.stream_free[r])
                self.next_join[r] += 1
                continue
            group = plan.comm_group[self.next_comm[r]]
            seq = self.sequence.get((group.key, r), 0)
            self.sequence[(group.key, r)] = seq + 1
            # a blocking op starts after the rank's launch gap; an overlapped one is issued as the last
            # kernel before it ends, and its stream starts it without the compute stream's gap
            arrive = self.clock[r] if plan.overlapped[comm] else self.clock[r] + plan.gap_us[comm]
            self.waiting.setdefault((group.key, seq), {})[r] = (arrive, self.next_comm[r])
            if not plan.overlapped[comm]:
                return
            self.pending[r] += 1
            self.next_comm[r] += 1
            self.cursor[r] = comm + 1

    def _complete(self, key: tuple[str, int], arrived: dict[int, tuple[float, int]]) -> list[int]:
        """End one communication op on all its members at the last start plus the transfer; returns the
        ranks that may run on (every member of a blocking op; those it released from a join)."""
        plans = self.plans
        pos_of = {m: plans[m].comm_pos[comm_index] for m, (_, comm_index) in arrived.items()}
        any_rank = next(iter(arrived))
        overlapped = bool(plans[any_rank].overlapped[pos_of[any_rank]])
        group = self._group(arrived)
        # an expert exchange (all-to-all) ends when its busiest member has received (or sent back) its
        # tokens; any other collective moves the same volume on every member
        member_us = [plans[m].dur_us[pos_of[m]] for m in arrived]
        busiest = group.name == "exp"
        transfer = float(np.max(member_us) if busiest else np.mean(member_us)) * slow_link_factor(self.scenario, group)
        kernel = plans[any_rank].kernels[plans[any_rank].kernel_id[pos_of[any_rank]]]
        transfer = misaligned_transit(self.scenario, kernel, transfer)
        # an overlapped op starts when its stream is free; a blocking one when the rank arrives
        starts = {m: max(a, self.stream_free[m]) if overlapped else a for m, (a, _) in arrived.items()}
        last = max(starts.values())
        step = int(plans[any_rank].step_of[pos_of[any_rank]])
        transfer += retransmission_wait(self.scenario, group, step, self.retransmitted)
        if overlapped:  # members at their join have finished computing; the others compute on
            compute_ends = max(self.clock[m] if self.blocked_at_join[m] else np.inf for m in arrived)
            transfer = contended_transfer(self.scenario, last, compute_ends, transfer)
        ordinal = len(self.collectives)
        ends = {}
        for m, start in starts.items():
            mpos = pos_of[m]
            end = last + transfer + self.rng.uniform(0.0, 2.0)
            self.start_us[m][mpos] = start
            plans[m].dur_us[mpos] = end - start
            self.ordinal_at[m][mpos] = ordinal
            ends[m] = end
            if overlapped:
                self.stream_free[m] = end
                self.pending[m] -= 1
            else:
                self.clock[m] = end
                self.cursor[m] = mpos + 1
                self.next_comm[m] += 1
        plan, pos = plans[any_rank], pos_of[any_rank]
        self.collectives.append(
            Collective(
                ordinal,
                kernel,
                int(plan.step_of[pos]),
                group,
                key[1],
                {m: int(round(a * 1000)) + BASE_CLOCK_NS for m, a in starts.items()},
                {m: int(round(e * 1000)) + BASE_CLOCK_NS for m, e in ends.items()},
                transfer * 1000,
            )
        )
        if not overlapped:
            return list(arrived)
        released = [m for m in arrived if self.blocked_at_join[m] and not self.pending[m]]
        for m in released:
            self.blocked_at_join[m] = False
        return released


def simulate(scenario: Scenario, seed: int, topology: Topology) -> tuple[list[RankTimeline], list[Collective]]:
    """Simulate every rank of ``scenario``; deterministic for ``seed``."""
    plans = [_plan(scenario, rank, topology, seed) for rank in range(topology.world)]
    simulation = _Simulation(scenario, plans, seed)
    simulation.run()
    offsets = {r: f.offset_us for f in _faults(scenario, "clock_offset") for r in f.ranks}
    timelines = [
        _timeline(scenario, plan, simulation, int(round(offsets.get(plan.rank, 0.0) * 1000)) + BASE_CLOCK_NS)
        for plan in plans
    ]
    if _faults(scenario, "partial_capture"):
        timelines = [_cut_edges(t, plans[t.rank].firsts) for t in timelines]
    return timelines, simulation.collectives


def _timeline(scenario: Scenario, plan: _RankPlan, simulation: _Simulation, offset: int) -> RankTimeline:
    """One rank's simulated events in ns on its own clock (``offset`` added), with their ground truth, in
    the order they start (an overlapped op starts among the compute its stream runs beside)."""
    r, firsts = plan.rank, plan.firsts
    start_ns = np.round(simulation.start_us[r] * 1000).astype(np.int64)
    duration_ns = np.round(plan.dur_us * 1000).astype(np.int64)
    end_ns = start_ns + duration_ns
    lasts = np.append(firsts[1:], len(start_ns)) - 1
    # the step starts STEP_HEAD_US before its first kernel, and before any stall at its top
    head_ns = int(STEP_HEAD_US * 1000) + np.round(plan.head_us * 1000).astype(np.int64)
    step_start_ns = start_ns[firsts] - head_ns + offset
    step_end_ns = end_ns[lasts] + offset
    timeline = RankTimeline(
        rank=r,
        kernels=plan.kernels,
        kernel_id=plan.kernel_id,
        start_ns=start_ns + offset,
        duration_ns=duration_ns,
        wait_ns=np.zeros(len(start_ns), dtype=np.int64),
        step=plan.step_of,
        region=plan.arrays["region"],
        layer_index=plan.arrays["layer_index"],
        layer_role=plan.arrays["layer_role"],
        micro_batch=plan.arrays["micro_batch"],
        block=plan.arrays["block"],
        collective=simulation.ordinal_at[r],
        step_start_ns=step_start_ns,
        step_end_ns=step_end_ns,
        layers_held=tuple(sorted({int(x) for x in plan.arrays["layer_index"] if x >= 0})),
        clock_offset_ns=offset - BASE_CLOCK_NS,
        clock_factor=plan.clock_factor,
        aicore_freq=_freq_samples(scenario, r, step_start_ns, step_end_ns),
        launch_lead_ns=np.where(plan.starved, STARVED_LEAD_NS, HOST_LEAD_NS).astype(np.int64),
        overlapped=plan.overlapped,
    )
    order = np.argsort(start_ns, kind="stable")
    _keep(timeline, order[~plan.dropped[order]])
    # the gap before each event since the end of the last one its rank waited for (not an overlapped op)
    ends = np.where(timeline.overlapped, np.iinfo(np.int64).min, timeline.start_ns + timeline.duration_ns)
    timeline.wait_ns[1:] = np.clip(timeline.start_ns[1:] - np.maximum.accumulate(ends)[:-1], 0, None)
    return timeline


EVENT_FIELDS = (
    "kernel_id",
    "start_ns",
    "duration_ns",
    "wait_ns",
    "step",
    "region",
    "layer_index",
    "layer_role",
    "micro_batch",
    "block",
    "collective",
    "clock_factor",
    "launch_lead_ns",
    "overlapped",
)


def _keep(timeline: RankTimeline, index: np.ndarray) -> None:
    """Keep (and order) the events ``index`` selects, in every per-event field."""
    for name in EVENT_FIELDS:
        setattr(timeline, name, getattr(timeline, name)[index])


def _cut_edges(timeline: RankTimeline, firsts: np.ndarray, share: float = 0.4) -> RankTimeline:
    """A capture that starts and stops inside a step (``firsts``: each step's first event): drop the first
    share of the first step's events and the last share of the last step's."""
    n = len(timeline.start_ns)
    keep = np.ones(n, dtype=bool)
    keep[: int((np.append(firsts, n)[1] - firsts[0]) * share)] = False
    keep[n - int((n - firsts[-1]) * share) :] = False
    _keep(timeline, keep)
    timeline.wait_ns[0] = 0
    return timeline
