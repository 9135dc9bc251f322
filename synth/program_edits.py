"""Edits of a rank's one-step program the timeline tiles over the steps: an op inserted into every step
(an exposed AI CPU op), or into some steps only (a warm-up step's one-time broadcast) — a row every step
carries, dropped from the steps without it as a placeholder that takes no time."""

from __future__ import annotations

import numpy as np

from npuprof.synth.kernels import Kernel, hccl
from npuprof.synth.program import HEAD, LAYER, Program
from npuprof.synth.scenarios import Scenario

WARMUP = "warmup_step"
BROADCAST_MB_PER_MS = 20.0  # the planted broadcast's volume per ms it takes (its transfer is its time)
BROADCAST_ROW = 0  # where in each step's program the planted broadcast sits: the step's top


def with_exposed_aicpu(program: Program, scenario: Scenario) -> dict[str, np.ndarray]:
    """The program's per-kernel arrays of one step, with (planted aicpu_exposed) an AI CPU op of the
    fault's ``gap_us`` inside its layer, right after the layer's first kernel."""
    arrays = program.arrays()
    for fault in [f for f in scenario.faults if f.kind == "aicpu_exposed"]:
        rows = np.flatnonzero((arrays["region"] == LAYER) & (arrays["layer_index"] == fault.layer))
        if not rows.size:
            continue  # this pipeline stage does not hold the layer
        aicpu = Kernel(
            "NonZero",
            "NonZero",
            "AI_CPU",
            fault.gap_us,
            "none",
            block_dim=1,
            input_shapes="1024",
            output_shapes="1024,1",
            input_dtypes="BOOL",
            output_dtypes="INT64",
        )
        program.kernels.append(aicpu)
        values = {
            "kernel_id": len(program.kernels) - 1,
            "region": LAYER,
            "layer_index": fault.layer,
            "layer_role": "forward",
            "micro_batch": 0,
            "block": "attention",
            "gap_before_us": 0.0,
            "overlapped": False,
            "joins": False,
        }
        # inside the layer, right after its first kernel: unambiguously part of layer `fault.layer`
        arrays = {k: np.insert(v, int(rows[0]) + 1, values[k]) for k, v in arrays.items()}
    return arrays


def with_warmup_broadcast(program: Program, arrays: dict[str, np.ndarray], scenario: Scenario) -> dict[str, np.ndarray]:
    """``arrays`` with (planted warmup_step) a broadcast over data parallel at the top of the step, as
    torch's DDP broadcasts its parameters from rank 0 before the first forward: its time is the fault's
    ``gap_us``. Every step's program carries the row; warm_up_placeholders says where it does not run."""
    fault = next((f for f in scenario.faults if f.kind == WARMUP), None)
    if fault is None:
        return arrays
    program.kernels.append(hccl("broadcast", "dp", fault.gap_us, fault.gap_us / 1000.0 * BROADCAST_MB_PER_MS))
    values = {
        "kernel_id": len(program.kernels) - 1,
        "region": HEAD,
        "layer_index": -1,
        "layer_role": "",
        "micro_batch": 0,
        "block": "",
        "gap_before_us": 0.0,
        "overlapped": False,
        "joins": False,
    }
    return {k: np.insert(v, BROADCAST_ROW, values[k]) for k, v in arrays.items()}


def warm_up_placeholders(scenario: Scenario, step_of: np.ndarray, position: np.ndarray) -> np.ndarray:
    """Per event of every step (``step_of``: its step ordinal, ``position``: its place in its step), whether
    it is the planted broadcast's row (with_warmup_broadcast's, at BROADCAST_ROW of each step) in a step
    that is not a warm-up step (the fault's ``steps``; its first step when none): a placeholder the
    timeline runs as nothing and drops."""
    fault = next((f for f in scenario.faults if f.kind == WARMUP), None)
    if fault is None:
        return np.zeros(len(step_of), dtype=bool)
    warm = np.isin(step_of, fault.steps or (0,))
    return (position == BROADCAST_ROW) & ~warm
