"""HCCL's data moves under each communication op of a rank: the slices its planes move, as trace_view.json's
HCCL ``Plane N`` lanes show them.

An op on n members moves its bytes in n − 1 slices, one per peer, each on its own plane, all starting
after the op's start handshakes (the first ``1 − DATA_SHARE`` of its transit of an aligned buffer) and
moving in parallel to the op's end. Slices are 512-byte multiples; a kernel whose buffer is planted
misaligned (``Kernel.misaligned_bytes``) leaves its last slice that many bytes past a multiple, and that
slice moves at 1 / factor of the others' rate (planted sdma_misaligned): the op's transit grows by what
that slice takes longer (``comm_faults.misaligned_transit``), and its aligned slices end early.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npuprof.synth.comm_faults import DATA_SHARE, misaligned_factor
from npuprof.synth.scenarios import Scenario
from npuprof.synth.timeline import Collective, RankTimeline

ALIGNMENT_BYTES = 512  # the SDMA engine's burst alignment


@dataclass(frozen=True)
class PlaneTasks:
    """Every data move of one rank's ops, in op order: the device event it belongs to (``event``), its
    plane (0-based), rank-clock start and duration (ns), bytes, and whether it went over RDMA."""

    event: np.ndarray
    plane: np.ndarray
    start_ns: np.ndarray
    duration_ns: np.ndarray
    bytes: np.ndarray
    rdma: np.ndarray


def plane_tasks(t: RankTimeline, collectives: list[Collective], scenario: Scenario) -> PlaneTasks:
    """The slices each communication op of ``t`` moves (vectorised over its ops)."""
    events = np.flatnonzero(t.collective >= 0)
    ordinals = t.collective[events]
    transit = np.array([c.transfer_ns for c in collectives], dtype=float)[ordinals]
    members = np.array([len(c.group.members) for c in collectives], dtype=np.int64)[ordinals]
    total = np.array([c.kernel.transfer_mb * 1e6 for c in collectives], dtype=float)[ordinals]
    off = np.array([c.kernel.misaligned_bytes for c in collectives], dtype=np.int64)[ordinals]
    rdma = np.array([c.group.name in scenario.rdma_groups for c in collectives], dtype=bool)[ordinals]
    slices = np.maximum(members - 1, 1)
    op = np.repeat(np.arange(len(events)), slices)
    plane = np.arange(len(op)) - np.repeat(np.cumsum(slices) - slices, slices)
    share = total[op] / slices[op]
    aligned = np.where(share >= ALIGNMENT_BYTES, np.floor(share / ALIGNMENT_BYTES) * ALIGNMENT_BYTES, np.ceil(share))
    is_last = plane == slices[op] - 1
    planted = is_last & (off[op] > 0) & (aligned >= 2 * ALIGNMENT_BYTES)
    size = np.where(planted, aligned - ALIGNMENT_BYTES + off[op], aligned)
    factor = np.where(off > 0, misaligned_factor(scenario), 1.0)
    data_ns = transit * DATA_SHARE / (1.0 + (factor - 1.0) * DATA_SHARE)  # an aligned slice's time
    longest = data_ns * factor
    end = t.start_ns[events] + t.duration_ns[events]
    slice_ns = np.where(planted, longest[op] * size / aligned, data_ns[op])
    return PlaneTasks(
        event=events[op],
        plane=plane,
        start_ns=np.round(end[op] - longest[op]).astype(np.int64),
        duration_ns=np.round(slice_ns).astype(np.int64),
        bytes=size.astype(np.int64),
        rdma=rdma[op],
    )
