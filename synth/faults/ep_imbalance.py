"""The faults whose findings ep_imbalance reports (pipeline/stages/diagnostics/detectors/ep_imbalance.py):
ep_load_imbalance_suspected, reduced_work_or_dummy_rank."""

from __future__ import annotations

from npuprof.synth.planting import Fault, FaultType, Scenario, register

register(
    FaultType(
        "ep_load_imbalance_suspected",
        ("ranks", "factor"),
        "``ranks`` receive factor × the routed tokens of each other member of their expert group, the group's total "
        "unchanged",
    ),
    scenarios=(
        Scenario(
            "ep_imbalance",
            "MoE decode with expert parallel dispatch/combine; rank 1 receives 4x the routed tokens",
            model="moe",
            training=False,
            phase="decode",
            tokens=256,
            micro_batches=1,
            faults=(Fault("ep_load_imbalance_suspected", ranks=(1,), factor=4.0),),
        ),
        Scenario(
            "ep_hot_prefill",
            "MoE prefill with expert parallel dispatch/combine; the router sends rank 1 six times the tokens of "
            "each other rank (two thirds of all): every MoE layer's combine waits for its experts, and its "
            "dispatch and combine move most of the data",
            model="moe",
            training=False,
            phase="prefill",
            tokens=2048,
            micro_batches=1,
            faults=(Fault("ep_load_imbalance_suspected", ranks=(1,), factor=6.0),),
        ),
        Scenario(
            "ep_hot_training",
            "MoE training, data and expert parallel; rank 1's experts receive four times the tokens of each "
            "other rank's, in the forward's and the backward's all-to-alls alike",
            model="moe",
            tokens=2048,
            faults=(Fault("ep_load_imbalance_suspected", ranks=(1,), factor=4.0),),
        ),
        Scenario(
            "moe_balanced",
            "the clean control of ep_hot_training: MoE training whose router spreads the tokens evenly",
            model="moe",
            tokens=2048,
        ),
        Scenario(
            "moe_prefill_balanced",
            "the clean control of ep_hot_prefill: MoE prefill whose router spreads the tokens evenly",
            model="moe",
            training=False,
            phase="prefill",
            tokens=2048,
            micro_batches=1,
        ),
    ),
    twins=(
        "ep_imbalance",
        # a hot expert rank carrying most of the tokens, in inference and in training (forward and backward):
        # the twin routes the same tokens evenly; every MoE layer's combine waits for the hot rank's experts,
        # and its dispatch and combine move the hot rank's tokens
        "ep_hot_prefill",
        "ep_hot_training",
    ),
)

register(
    FaultType(
        "reduced_work_or_dummy_rank",
        ("ranks",),
        "``ranks`` receive no routed tokens",
    ),
    scenarios=(
        Scenario(
            "dummy_rank",
            "MoE decode; rank 3 gets no routed tokens (reduced-work rank)",
            model="moe",
            training=False,
            phase="decode",
            tokens=256,
            micro_batches=1,
            faults=(Fault("reduced_work_or_dummy_rank", ranks=(3,)),),
        ),
    ),
)
