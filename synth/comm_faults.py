"""The planted faults of synth's communication: how a fault changes one op's transfer time.

A slow link stretches every op of the groups it joins; a lost RDMA packet holds one op a retransmission
timeout; contention slows an op on the communication stream while its members compute beside it; a buffer
that is not 512-byte aligned leaves one slice that moves slower than the others. The simulation
(timeline.py) asks these for each op it completes.
"""

from __future__ import annotations

import numpy as np

from npuprof.synth.groups import GroupInstance
from npuprof.synth.kernels import Kernel
from npuprof.synth.scenarios import Scenario


def slow_link_factor(scenario: Scenario, group: GroupInstance) -> float:
    """How many times longer ``group``'s ops transfer: the slowest planted link among its members."""
    factor = 1.0
    for fault in scenario.faults:
        if fault.kind == "slow_link_suspected" and set(fault.link) <= set(group.members):
            factor = max(factor, fault.factor)
    return factor


def retransmission_wait(scenario: Scenario, group: GroupInstance, step: int, retransmitted: set[int]) -> float:
    """The wait of a planted RDMA retransmission (µs): the first op over RDMA (a group of ``rdma_groups``;
    of the fault's ranks where it names them) in each of the fault's steps waits ``gap_us`` more — the
    steps it has hit are added to ``retransmitted``; 0 for every other op."""
    if group.name not in scenario.rdma_groups:
        return 0.0
    for fault in scenario.faults:
        if fault.kind != "rdma_retransmission" or (fault.ranks and not set(group.members) <= set(fault.ranks)):
            continue
        if step in fault.steps and step not in retransmitted:
            retransmitted.add(step)
            return fault.gap_us
    return 0.0


def contended_transfer(scenario: Scenario, start: float, compute_ends: float, transfer: float) -> float:
    """An op on the communication stream starting at ``start``: until its members' compute ends it moves at
    1 / factor of its speed alone (planted bandwidth_contention: the compute takes its share of the memory
    bandwidth), then at full speed; ``transfer`` is its time alone."""
    factor = float(np.prod([f.factor for f in scenario.faults if f.kind == "bandwidth_contention"]))
    if factor == 1.0:
        return transfer
    beside = max(compute_ends - start, 0.0)
    if beside >= transfer * factor:
        return transfer * factor
    return beside + transfer - beside / factor


DATA_SHARE = 0.9  # of an aligned op's transit, the part its slices move data (the rest: start handshakes)


def misaligned_factor(scenario: Scenario) -> float:
    """How many times longer a planted misaligned slice moves than an aligned one of its size."""
    return float(np.prod([f.factor for f in scenario.faults if f.kind == "sdma_misaligned"]))


def misaligned_transit(scenario: Scenario, kernel: Kernel, transfer: float) -> float:
    """An op's transit with its misaligned slice (if its kernel has one, ``Kernel.misaligned_bytes``) at
    1 / factor of the rate: the data part (DATA_SHARE of the aligned transit) takes factor × as long on
    its slowest plane."""
    if not kernel.misaligned_bytes:
        return transfer
    return transfer * (1.0 + (misaligned_factor(scenario) - 1.0) * DATA_SHARE)
