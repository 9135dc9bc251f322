"""A planted sweep: many small roots in four cohorts, with a card that is slow again and again on one
host, a regression at a known point of a series, single outliers and clean cohorts — and the truth
about each in ``OUT/sweep_truth.json``. What sweep intelligence must find, and what must stay silent.

Layout (40 roots, 4 ranks each, one host per root, the rank's card = its device id):

- ``train-build-NNN`` (cohort "train": dense training, DP4, hosts train-1..3), builds 1-10: from
  build 7 on, FlashAttentionScore (and its backward) runs 1.8x longer on every rank — one change point.
- ``infer-run-NN`` (cohort "infer": dense prefill, TP4), 14 runs on hosts node-a .. node-d in
  turn: device 2 of node-b is slow in each of the 4 captures it appears in (1.5x compute in three,
  its AI Core clock at 2/3 of nominal in one); node-c's device 1 is slow once (not a fleet suspect);
  run 06 runs every MatMulV3 1.4x longer (an operator outlier).
- ``deep-run-NN`` (cohort "deep": dense training with 3 layers), 8 clean runs on node-a and node-c.
- the HCCS link between node-a's devices 0 and 1 carries two thirds of its peers' bandwidth in every
  capture on node-a, of the infer and the deep jobs alike: too little for any capture's own
  slow_link_suspected (half, at most), a fleet link suspect by repetition. node-d's 2-3 link is a
  third as fast once (infer run 03: that capture's finding, not a fleet suspect).
- ``moe-run-NN`` (cohort "moe": balanced MoE training, DP and EP over 4 ranks), 8 healthy runs on
  hosts moe-1 and moe-2 whose router spreads the tokens a little differently in each capture (each
  rank's share within ``ROUTING_SPREAD`` of even), as real routing does: nothing to find.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from npuprof.synth.faults import Fault
from npuprof.synth.root_writer import generate
from npuprof.synth.scenarios import Scenario
from npuprof.synth.scenarios import scenario as named_scenario

HOSTS = ("node-a", "node-b", "node-c", "node-d")  # the inference cluster
TRAIN_HOSTS = ("train-1", "train-2", "train-3")
DEEP_HOSTS = ("node-a", "node-c")  # share the inference cluster's clean cards, never node-b
SUSPECT = {"host_name": "node-b", "device_id": 2}
REGRESSION_BUILD = 7
REGRESSION_FACTOR = 1.8
MOE_HOSTS = ("moe-1", "moe-2")
# the MoE runs' seeds (their routing): from this one, run 00's router gives one rank so few tokens that
# its grouped matmuls cross the ridge (cube -> aic_mte) while no other capture's do — the bound-family
# flip a sweep must not call a change
MOE_SEED = 220
ROUTING_SPREAD = 0.25  # a healthy router's per-rank share of the routed tokens: even ± this
# tokens per MoE step: with the spread, some ranks' experts get fewer rows than the grouped matmul's ridge
# and others more, so its bound family flips from capture to capture while its time does not jump
MOE_TOKENS = 640
MOE_LAYERS = 6  # enough grouped matmuls that the flip moves more time than a sweep's least effect
SMALL = {"steps": 3, "layers": 2}
SLOW_LINK = {"host_name": "node-a", "devices": (0, 1), "factor": 1.5}
DECOY_LINK = {"host_name": "node-d", "devices": (2, 3), "factor": 3.0, "run": 3}


def _train(build: int) -> Scenario:
    base = named_scenario("clean", **SMALL)
    if build >= REGRESSION_BUILD:
        return replace(
            base,
            kernel_factors=(("FlashAttentionScore", REGRESSION_FACTOR), ("FlashAttentionScoreGrad", REGRESSION_FACTOR)),
        )
    return base


def _infer(run: int) -> tuple[Scenario, str, dict]:
    """The scenario, host and planted truth of inference run ``run`` (0-based)."""
    base = named_scenario("clean_inference", **SMALL)
    host = HOSTS[run % len(HOSTS)]
    fault = None
    if host == SUSPECT["host_name"] and run == 9:
        fault = Fault("aicore_freq_throttled", ranks=(2,), steps=(), factor=1.5)
    elif host == SUSPECT["host_name"]:
        fault = Fault("slow_rank_suspected", ranks=(2,), factor=1.5)
    elif run == 2:
        fault = Fault("slow_rank_suspected", ranks=(1,), factor=1.5)
    if fault is not None:
        planted = {"planted": fault.kind, "rank": fault.ranks[0], "factor": fault.factor}
        return replace(base, faults=(fault,)), host, {"host": host, **planted}
    if run == 6:
        return replace(base, kernel_factors=(("MatMulV3", 1.4),)), host, {"host": host, "planted": "operator MatMulV3"}
    return base, host, {"host": host, "planted": None}


def _with_link(entry: dict) -> dict:
    """The entry with the fleet's slow link planted where it runs: on SLOW_LINK's host every time, on
    DECOY_LINK's once."""
    link = SLOW_LINK if entry["host"] == SLOW_LINK["host_name"] else None
    if entry["host"] == DECOY_LINK["host_name"] and entry["name"] == f"infer-run-{DECOY_LINK['run']:02d}":
        link = DECOY_LINK
    if link is None:
        return entry
    fault = Fault("slow_link_suspected", link=link["devices"], factor=link["factor"])
    scenario = replace(entry["scenario"], faults=(*entry["scenario"].faults, fault))
    return {**entry, "scenario": scenario, "slow_link": {"devices": list(link["devices"]), "factor": link["factor"]}}


def sweep_plan() -> list[dict]:
    """Every root of the planted sweep: its dir name, scenario, host, seed and planted truth."""
    plan = []
    for build in range(1, 11):
        regressed = build >= REGRESSION_BUILD
        plan.append(
            {
                "name": f"train-build-{build:03d}",
                "cohort": "train",
                "scenario": _train(build),
                "host": TRAIN_HOSTS[build % len(TRAIN_HOSTS)],
                "planted": "regression FlashAttentionScore" if regressed else None,
            }
        )
    for run in range(14):
        sc, host, truth = _infer(run)
        plan.append({"name": f"infer-run-{run:02d}", "cohort": "infer", "scenario": sc, **truth})
    deep = named_scenario("clean", steps=3, layers=3)
    for run in range(8):
        host = DEEP_HOSTS[run % len(DEEP_HOSTS)]
        plan.append({"name": f"deep-run-{run:02d}", "cohort": "deep", "scenario": deep, "host": host, "planted": None})
    plan = [_with_link(entry) for entry in plan]
    for seed, entry in enumerate(plan, start=100):
        entry["seed"] = seed
    moe = named_scenario("moe_balanced", tokens=MOE_TOKENS, steps=3, layers=MOE_LAYERS)
    for run in range(8):
        seed = MOE_SEED + run
        weights = np.random.default_rng(seed).uniform(1 - ROUTING_SPREAD, 1 + ROUTING_SPREAD, moe.ranks)
        routed = replace(moe, routing_weights=tuple(round(float(w), 3) for w in weights))
        host = MOE_HOSTS[run % len(MOE_HOSTS)]
        plan.append({"name": f"moe-run-{run:02d}", "cohort": "moe", "scenario": routed, "host": host, "planted": None})
        plan[-1]["seed"] = seed
    return plan


def _write_one(out: str, entry: dict) -> str:
    # AI Core clock samples live in trace_view.json for a text capture: only the throttled root needs it
    trace = entry["planted"] == "aicore_freq_throttled"
    generate(out, entry["scenario"], seed=entry["seed"], host=entry["host"], trace=trace, overwrite=True)
    return out


def _wall_change(out: Path, plan: list[dict]) -> float:
    """The regression's relative change of the train cohort's median step wall, from the roots' truth."""

    def median_wall(entries: list[dict]) -> float:
        walls = []
        for entry in entries:
            truth = json.loads((out / entry["name"] / "ground_truth.json").read_text(encoding="utf-8"))
            walls += [wall for rank in truth["ranks"].values() for wall in rank["step_wall_us"]]
        return statistics.median(walls)

    train = [e for e in plan if e["cohort"] == "train"]
    before = median_wall([e for e in train if not e["planted"]])
    return median_wall([e for e in train if e["planted"]]) / before - 1


def generate_sweep(out: str | Path, *, jobs: int | None = None, overwrite: bool = False) -> dict:
    """Write the planted sweep's roots under ``out`` and ``out/sweep_truth.json``; returns the truth.
    A non-empty ``out`` is refused unless ``overwrite``."""
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"{out} is not empty")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    plan = sweep_plan()
    with ProcessPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        list(pool.map(_write_one, [str(out / e["name"]) for e in plan], plan))
    truth = {
        "root_count": len(plan),
        "series_key": r"build-(\d+)",
        "regression": {
            "cohort": "train",
            "first_root": f"train-build-{REGRESSION_BUILD:03d}",
            "kernel": "FlashAttention",
            "kernel_factor": REGRESSION_FACTOR,
            "step_wall_change": _wall_change(out, plan),
        },
        "fleet_suspect": SUSPECT,
        "fleet_link_suspect": {"host_name": SLOW_LINK["host_name"], "devices": list(SLOW_LINK["devices"])},
        "roots": [
            {k: v for k, v in e.items() if k != "scenario"}
            | {"scenario": e["scenario"].name, "kernel_factors": dict(e["scenario"].kernel_factors)}
            | ({"routing_weights": list(e["scenario"].routing_weights)} if e["scenario"].routing_weights else {})
            for e in plan
        ],
    }
    (out / "sweep_truth.json").write_text(json.dumps(truth, indent=2), encoding="utf-8")
    return truth
