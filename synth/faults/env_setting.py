"""The faults whose findings env_setting reports (pipeline/stages/diagnostics/detectors/env_setting.py):
env_setting."""

from __future__ import annotations

from npuprof.synth.planting import Fault, FaultType, Scenario, register

register(
    FaultType(
        "env_setting",
        ("ranks", "gap_us"),
        "``ranks``, every rank when empty, record ASCEND_LAUNCH_BLOCKING=1, so every compute kernel waits ``gap_us`` "
        "for its launch, as host_launch_bound",
        also_reported=("host_launch_bound",),
        environment={"ASCEND_LAUNCH_BLOCKING": "1"},
    ),
    scenarios=(
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
    ),
    twins=(
        # the twin runs without ASCEND_LAUNCH_BLOCKING: launches ahead
        "launch_blocking",
    ),
)
