"""The faults whose findings pp_schedule reports (pipeline/stages/diagnostics/detectors/pp_schedule.py):
pp_stage_imbalance, pp_bubble_heavy."""

from __future__ import annotations

from npuprof.synth.planting import Fault, FaultType, Scenario, register


def _stage_layers_in_range(chosen: Scenario, fault: Fault) -> str | None:
    if chosen.pp < 2 or not 0 < fault.layer < chosen.layers:
        return f"pp_stage_layers needs pipeline parallel and 0 < layer < {chosen.layers}"
    return None


def _few_micro_batches(chosen: Scenario, fault: Fault) -> str | None:
    if (chosen.pp - 1) / (chosen.micro_batches + chosen.pp - 1) < 0.2:
        return f"{chosen.micro_batches} micro-batches over {chosen.pp} stages are not few"
    return None


register(
    FaultType(
        "pp_stage_imbalance",
        ("ranks", "layer"),
        "the last pipeline stage, ``ranks``, holds ``layer`` decoder layers besides its LM head and loss; without it "
        "the split is balanced: the last stage holds one layer fewer than an even split",
        check=_stage_layers_in_range,
    ),
    scenarios=(
        Scenario(
            "pipeline_parallel",
            "dense training like the real Qwen3 sample: TP1 PP2 DP2, 2 micro-batches, batchSendRecv between "
            "stages; layers split 3 / 3, so the last stage (ranks 2, 3) also running the LM head and loss is "
            "the heavy one, and 2 micro-batches leave a third of the pipeline idle",
            pp=2,
            layers=6,
            faults=(Fault("pp_stage_imbalance", ranks=(2, 3), layer=3), Fault("pp_bubble_heavy")),
        ),
        Scenario(
            "pipeline_balanced",
            "the clean control of pipeline_parallel: TP1 PP2 DP2 with the layers split 4 / 2 (the last stage's "
            "LM head and loss weigh about a layer) and 8 micro-batches, so neither stage waits long for the other",
            pp=2,
            layers=6,
            micro_batches=8,
        ),
    ),
    twins=(
        # the twin of a stage imbalance is the balanced split (the last stage one layer fewer); the moved
        # layer takes its gradient sync and optimizer share along, the embedding and LM head stay
        "pipeline_parallel",
    ),
)

register(
    FaultType(
        "pp_bubble_heavy",
        (),
        "the scenario's micro-batch count leaves the pipeline's own fill / drain bubble above a fifth of it",
        check=_few_micro_batches,
    ),
)
