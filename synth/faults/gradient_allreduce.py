"""The faults whose findings gradient_allreduce reports
(pipeline/stages/diagnostics/detectors/gradient_allreduce.py): gradient_allreduce_exposed."""

from __future__ import annotations

from npuprof.synth.planting import Fault, FaultType, Scenario, register

register(
    FaultType(
        "gradient_allreduce_exposed",
        (),
        "training syncs its gradients in 4 all-reduce buckets after the whole backward; without it, one bucket per "
        "group of layers starts as their backward ends and runs on the communication stream under the rest of the "
        "backward, and the optimizer waits for the last",
    ),
    scenarios=(
        Scenario(
            "exposed_grad_allreduce",
            "dense training, data parallel; the gradient all-reduce runs after the whole backward in 4 buckets, "
            "none overlapped (its twin, clean, overlaps all but the last bucket with the backward)",
            faults=(Fault("gradient_allreduce_exposed"),),
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
    ),
    twins=(
        # the twin of a gradient sync after the backward is the same training with its buckets overlapped
        "exposed_grad_allreduce",
        # ... and under a distributed optimizer (ZeRO-1), whose gradients reduce-scatter; its twin is zero_overlapped
        "exposed_zero_sync",
    ),
)
