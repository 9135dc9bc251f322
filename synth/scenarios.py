"""Named scenarios: the fault modules' (synth/faults/), beside the clean ones and those that plant faults of
several topics at once (each parameterised; several combine)."""

from __future__ import annotations

from dataclasses import replace

from npuprof.synth.faults import FAULT_SCENARIOS, FAULT_TYPES
from npuprof.synth.planting import Fault, Scenario
from npuprof.synth.serving import dp_schedule, tp_serving

__all__ = ["SCENARIOS", "Scenario", "scenario"]

# the clean ones, then each fault module's (by module name), then the combined ones
_CLEAN = (
    Scenario("clean", "dense GQA training, data parallel, no fault planted"),
    Scenario(
        "clean_inference",
        "dense GQA prefill with tensor parallel all-reduces, no fault",
        training=False,
        phase="prefill",
        micro_batches=1,
    ),
    tp_serving(
        "serving",
        "vLLM-Ascend serving on 2 tensor-parallel ranks, captured without profiler steps: a prefill of four "
        "prompts, decodes, and chunked prefills beside decodes as requests arrive (synth/serving.py), eager",
    ),
    Scenario(
        "serving_dp",
        "vLLM-Ascend serving of a MoE model (GQA attention, routed experts) on 2 data-parallel ranks sharing "
        "their experts: rank 1 has no request for the first 10 forwards and runs a dummy forward in each, "
        "without LM head or sampling, so its expert exchanges meet rank 0's; then both serve",
        model="moe",
        training=False,
        phase="decode",
        ranks=2,
        micro_batches=1,
        forwards=(dp_forwards := dp_schedule()),
        steps=len(dp_forwards),
        step_marks=False,
    ),
)
_COMBINED = (
    Scenario(
        "demo",
        "dense prefill on 4 ranks (TP all-reduces): rank 2 computes 1.5x slower, "
        "and rank 0 idles 5 ms on the host before layer 2 in step 11 (ordinal 1)",
        training=False,
        phase="prefill",
        micro_batches=1,
        steps=4,
        layers=6,
        faults=(
            Fault("slow_rank_suspected", ranks=(2,), factor=1.5),
            Fault("device_idle_bubble", ranks=(0,), steps=(1,), layer=2, gap_us=5000.0),
        ),
    ),
    Scenario(
        "mixed",
        "MoE training: a slow rank, a hot EP rank and a clock offset on another rank",
        model="moe",
        tokens=2048,
        faults=(
            Fault("slow_rank_suspected", ranks=(3,), factor=1.5),
            Fault("ep_load_imbalance_suspected", ranks=(1,), factor=3.0),
            Fault("clock_offset", ranks=(2,), offset_us=2500.0),
        ),
    ),
)
SCENARIOS: dict[str, Scenario] = {s.name: s for s in (*_CLEAN, *FAULT_SCENARIOS.values(), *_COMBINED)}


def scenario(name: str, **overrides) -> Scenario:
    """A named scenario with CLI overrides (ranks, steps, layers, ...) applied; faults stay in range."""
    if name not in SCENARIOS:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    chosen = replace(SCENARIOS[name], **{k: v for k, v in overrides.items() if v is not None})
    if chosen.forwards and chosen.steps != len(chosen.forwards):
        raise ValueError(f"scenario {name}: runs {len(chosen.forwards)} forwards, one a step; steps cannot change")
    if chosen.pp > 1 and (not chosen.training or chosen.ranks % chosen.pp or chosen.layers % chosen.pp):
        raise ValueError(
            f"scenario {name}: pipeline parallel needs training, ranks and layers divisible by pp={chosen.pp}"
        )
    for fault in chosen.faults:
        problem = _out_of_range(chosen, fault)
        check = FAULT_TYPES[fault.kind].check
        problem = problem or (check(chosen, fault) if check else None)
        if problem:
            raise ValueError(f"scenario {name}: {problem}")
    return chosen


def _out_of_range(chosen: Scenario, fault: Fault) -> str | None:
    """Why ``fault`` names a rank, layer or step ``chosen`` does not have, or None."""
    parameters = FAULT_TYPES[fault.kind].parameters
    named = (*fault.ranks, *(fault.link if "link" in parameters else ()))
    bad = [r for r in named if r >= chosen.ranks]
    if bad:
        return f"fault {fault.kind} needs rank {max(bad)}, but only {chosen.ranks} ranks"
    if "layer" in parameters and fault.layer >= chosen.layers:
        return f"fault {fault.kind} targets layer {fault.layer}, but only {chosen.layers} layers"
    if any(s >= chosen.steps for s in fault.steps):
        return f"fault {fault.kind} targets step {max(fault.steps)}, but only {chosen.steps} steps"
    return None
