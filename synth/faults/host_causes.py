"""The faults whose findings host_causes reports (pipeline/stages/diagnostics/detectors/host_causes.py):
dataloader_stall, gc_pause, allocation_heavy, host_launch_bound, dynamic_shape_recompile, memcpy_in_step."""

from __future__ import annotations

from npuprof.synth.planting import STEP_TOP, Fault, FaultType, Scenario, register

STALL_PARAMETERS = ("ranks", "steps", "layer", "gap_us")


def _stall(what: str) -> str:
    return (
        f"``gap_us`` of the host in {what} before ``layer`` on ``steps`` of ``ranks``, every rank when empty; "
        "layer -1 (STEP_TOP): at the top of the step, inside ProfilerStep#N before its first kernel, as "
        "``for batch in loader:`` stalls"
    )


register(
    FaultType(
        "dataloader_stall",
        STALL_PARAMETERS,
        _stall("the dataloader"),
        also_reported_on_some_ranks=("slow_rank_suspected",),
    ),
    scenarios=(
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
            "slow_dataloader_rank",
            "dense training, data parallel; rank 1's data loader hands over each batch 1.5 ms late, at the top "
            "of every step before its first kernel (the profiler's step has started, the device has nothing to "
            "run), and the other ranks wait for it in their gradient all-reduce",
            faults=(Fault("dataloader_stall", ranks=(1,), layer=STEP_TOP, gap_us=1500.0),),
        ),
    ),
    twins=(
        # every rank stalls: closed on all of them at once
        "host_stalls",
        # a rank whose data loader delays its step's first kernel: the stall is inside its step (the profiler's
        # step has started), and its peers wait for it in their gradient all-reduce
        "slow_dataloader_rank",
    ),
)

register(
    FaultType(
        "gc_pause",
        STALL_PARAMETERS,
        _stall("a garbage collection"),
    ),
    twins=("host_stalls",),
)

register(
    FaultType(
        "allocation_heavy",
        STALL_PARAMETERS,
        _stall("a device memory allocation"),
    ),
    twins=("host_stalls",),
)

register(
    FaultType(
        "host_launch_bound",
        ("ranks", "gap_us"),
        "every compute kernel of ``ranks``, every rank when empty, waits ``gap_us`` for the host to launch it",
        also_reported_on_some_ranks=("slow_rank_suspected",),
    ),
    scenarios=(
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
            "launch_bound_rank",
            "dense training, data parallel; rank 1's host launches each compute kernel 15 us after its device "
            "could start it (about a tenth of its step), and the other ranks wait for it in every all-reduce",
            faults=(Fault("host_launch_bound", ranks=(1,), gap_us=15.0),),
        ),
    ),
    twins=(
        # the twin's launches are ahead of the device
        "launch_bound",
        # a rank launch-bound a tenth of its step: its peers wait for it in every all-reduce
        "launch_bound_rank",
    ),
)

register(
    FaultType(
        "dynamic_shape_recompile",
        STALL_PARAMETERS,
        _stall("an operator compile"),
    ),
    twins=("host_stalls",),
)

register(
    FaultType(
        "memcpy_in_step",
        ("ranks", "steps", "layer", "gap_us"),
        "a host-to-device copy of ``gap_us`` the device runs in stream order before ``layer`` on ``steps`` of "
        "``ranks``, launched ahead by the host: its kernels wait behind it",
    ),
    twins=("host_stalls",),
)
