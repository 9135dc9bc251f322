"""The faults whose findings small_packets reports (pipeline/stages/diagnostics/detectors/small_packets.py):
small_packet_collective."""

from __future__ import annotations

from npuprof.synth.planting import Fault, FaultType, Scenario, register

register(
    FaultType(
        "small_packet_collective",
        (),
        "training's gradient clipping all-reduces each parameter tensor's 4-byte norm on its own over the "
        "data-parallel group, one after another behind each tensor's norm kernel; without it the norm is one kernel "
        "over every tensor, with no communication",
    ),
    scenarios=(
        Scenario(
            "small_packets",
            "dense training; gradient clipping all-reduces each parameter tensor's norm on its own over the "
            "data-parallel group: 36 four-byte all-reduces back to back before the optimizer",
            faults=(Fault("small_packet_collective"),),
        ),
    ),
    twins=(
        # the twin takes the clipping norm as one kernel with no all-reduce: one 4-byte all-reduce's latency
        # (1 in 36) more than bucketing the norms into one all-reduce saves
        "small_packets",
    ),
)
