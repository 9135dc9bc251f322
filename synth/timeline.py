"""Simulate the device timeline of every rank: sequential kernels, collectives that synchronise.

Physics: on each rank kernels run one after another with small launch gaps. A collective starts
on a rank when that rank arrives; it ends at (about) the same moment on every rank of its group
— when the last rank has arrived plus the transfer time — so the waiting falls on the ranks that
arrived early. Planted faults change durations, gaps, transfers or clocks; nothing else differs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npuprof.synth.kernels import Kernel
from npuprof.synth.models import DENSE, MOE, LAYER, Program, Workload, build_step
from npuprof.synth.scenarios import Fault, Scenario

STEP_PREP_US = 350.0  # host work between steps (dataloader, step bookkeeping)
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
    collective: np.ndarray  # collective ordinal, -1 for compute
    step_start_ns: np.ndarray
    step_end_ns: np.ndarray
    clock_offset_ns: int = 0


@dataclass
class Collective:
    """One collective instance, identical across the ranks of its group."""

    ordinal: int
    kernel: Kernel
    step: int
    group: str
    arrive_ns: np.ndarray  # per rank, true time
    end_ns: np.ndarray  # per rank, true time
    transfer_ns: float
    slowed_link: bool


def _faults(scenario: Scenario, kind: str) -> list[Fault]:
    return [f for f in scenario.faults if f.kind == kind]


def _workload(scenario: Scenario, rank: int) -> Workload:
    tokens_factor = 1.0
    for fault in _faults(scenario, "ep_hot_rank"):
        if rank in fault.ranks:
            tokens_factor *= fault.factor
    reduced = any(rank in f.ranks for f in _faults(scenario, "reduced_work_rank"))
    return Workload(DENSE if scenario.model == "dense" else MOE, scenario.training, scenario.phase, scenario.tokens,
                    scenario.layers, scenario.micro_batches, scenario.ranks, tokens_factor, reduced)


def _with_exposed_aicpu(program: Program, scenario: Scenario) -> dict[str, np.ndarray]:
    arrays = program.arrays()
    for fault in _faults(scenario, "exposed_aicpu"):
        aicpu = Kernel("NonZero", "NonZero", "AI_CPU", fault.gap_us, "none", block_dim=1, input_shapes="1024", output_shapes="1024,1", input_dtypes="BOOL", output_dtypes="INT64")
        program.kernels.append(aicpu)
        at = int(np.flatnonzero((arrays["region"] == LAYER) & (arrays["layer_index"] == fault.layer))[0])
        values = {"kernel_id": len(program.kernels) - 1, "region": LAYER, "layer_index": fault.layer, "layer_role": "forward",
                  "micro_batch": 0, "block": "attention", "gap_before_us": 0.0}
        arrays = {k: np.insert(v, at, values[k]) for k, v in arrays.items()}
    return arrays


def simulate(scenario: Scenario, seed: int) -> tuple[list[RankTimeline], list[Collective]]:
    """Simulate every rank of ``scenario``; deterministic for ``seed``."""
    R, S = scenario.ranks, scenario.steps
    programs = []
    for rank in range(R):
        program = build_step(_workload(scenario, rank))
        programs.append((program, _with_exposed_aicpu(program, scenario)))
    n_step = len(programs[0][1]["kernel_id"])
    assert all(len(a["kernel_id"]) == n_step for _, a in programs), "ranks must share one program structure"
    N = n_step * S
    step = np.repeat(np.arange(S, dtype=np.int32), n_step)
    first_of_step = np.zeros(N, dtype=bool)
    first_of_step[::n_step] = True

    dur_us = np.empty((R, N))
    gap_us = np.empty((R, N))
    coll_kernel = np.array([k.hccl_group is not None for k in programs[0][0].kernels])
    is_coll = coll_kernel[np.tile(programs[0][1]["kernel_id"], S)]
    slow = {r: f.factor for f in _faults(scenario, "slow_rank") for r in f.ranks}
    for rank, (program, arrays) in enumerate(programs):
        rng = np.random.default_rng([seed, rank])
        kid = np.tile(arrays["kernel_id"], S)
        base = np.array([k.base_us for k in program.kernels])[kid]
        noise = rng.lognormal(0.0, 0.03, N)
        compute_factor = np.where(is_coll, 1.0, slow.get(rank, 1.0))
        dur_us[rank] = base * noise * compute_factor
        gap_us[rank] = rng.uniform(1.5, 6.0, N) + np.tile(arrays["gap_before_us"], S) + first_of_step * STEP_PREP_US
        for fault in _faults(scenario, "host_bubble"):
            if rank in fault.ranks:
                layer_first = np.flatnonzero((arrays["region"] == LAYER) & (arrays["layer_index"] == fault.layer))[0]
                for s in fault.steps or range(S):
                    gap_us[rank, s * n_step + layer_first] += fault.gap_us

    # Collectives: arrival positions assuming zero-length collectives, then a running per-rank
    # shift that absorbs each collective's wait + transfer. A loop over collectives, not events.
    coll_pos = np.flatnonzero(is_coll)
    inc = gap_us + np.where(is_coll, 0.0, dur_us)
    end_plain = np.cumsum(inc, axis=1)  # end of each event if collectives took no time
    start_plain = end_plain - np.where(is_coll, 0.0, dur_us)
    shift = np.zeros(R)
    shift_at = np.zeros((R, N))
    collectives: list[Collective] = []
    kernels0 = programs[0][0].kernels
    kid0 = np.tile(programs[0][1]["kernel_id"], S)
    links = _faults(scenario, "slow_link")
    rng = np.random.default_rng([seed, 10_000])
    previous = 0
    for ordinal, pos in enumerate(coll_pos):
        shift_at[:, previous:pos] = shift[:, None]
        arrive = start_plain[:, pos] + shift
        kernel = kernels0[kid0[pos]]
        slowed = bool(links)
        transfer = dur_us[:, pos].mean() * (max(f.factor for f in links) if links else 1.0)
        end = arrive.max() + transfer + rng.uniform(0.0, 2.0, R)
        collectives.append(Collective(ordinal, kernel, int(step[pos]), kernel.hccl_group, arrive * 1000, end * 1000, transfer * 1000, slowed))
        dur_us[:, pos] = end - arrive
        shift = end - end_plain[:, pos]
        shift_at[:, pos] = shift - (end - arrive)  # the collective itself starts at arrive
        previous = pos + 1
    shift_at[:, previous:] = shift[:, None]
    start_us = start_plain + shift_at

    ordinal_at = np.full(N, -1, dtype=np.int64)
    ordinal_at[coll_pos] = np.arange(len(coll_pos))
    offsets = {r: f.offset_us for f in _faults(scenario, "clock_offset") for r in f.ranks}
    timelines = []
    for rank, (program, arrays) in enumerate(programs):
        start_ns = np.round(start_us[rank] * 1000).astype(np.int64)
        duration_ns = np.round(dur_us[rank] * 1000).astype(np.int64)
        end_ns = start_ns + duration_ns
        wait_ns = np.zeros(N, dtype=np.int64)
        wait_ns[1:] = np.clip(start_ns[1:] - np.maximum.accumulate(end_ns)[:-1], 0, None)
        firsts = np.arange(S) * n_step
        lasts = firsts + n_step - 1
        step_start = start_ns[firsts] - int(STEP_PREP_US * 500)
        offset = int(round(offsets.get(rank, 0.0) * 1000))
        timelines.append(
            RankTimeline(
                rank=rank, kernels=program.kernels, kernel_id=np.tile(arrays["kernel_id"], S),
                start_ns=start_ns + BASE_CLOCK_NS + offset, duration_ns=duration_ns, wait_ns=wait_ns, step=step,
                region=np.tile(arrays["region"], S), layer_index=np.tile(arrays["layer_index"], S),
                layer_role=np.tile(arrays["layer_role"], S), micro_batch=np.tile(arrays["micro_batch"], S),
                block=np.tile(arrays["block"], S), collective=ordinal_at,
                step_start_ns=step_start + BASE_CLOCK_NS + offset, step_end_ns=end_ns[lasts] + BASE_CLOCK_NS + offset,
                clock_offset_ns=offset,
            )
        )
    for c in collectives:
        c.arrive_ns = c.arrive_ns + BASE_CLOCK_NS
        c.end_ns = c.end_ns + BASE_CLOCK_NS
    if _faults(scenario, "partial_capture"):
        timelines = [_cut_edges(t, n_step) for t in timelines]
    return timelines, collectives


def _cut_edges(timeline: RankTimeline, n_step: int, share: float = 0.4) -> RankTimeline:
    """A capture that starts and stops inside a step: drop the first and last ``share`` of those steps."""
    n = len(timeline.start_ns)
    keep = np.ones(n, dtype=bool)
    keep[: int(n_step * share)] = False
    keep[n - int(n_step * share):] = False
    fields = ("kernel_id", "start_ns", "duration_ns", "wait_ns", "step", "region", "layer_index", "layer_role", "micro_batch", "block", "collective")
    for name in fields:
        setattr(timeline, name, getattr(timeline, name)[keep])
    timeline.wait_ns[0] = 0
    return timeline
