"""The derived metrics every output uses, defined once: report.md's glossary, the workbook's README
sheet and report.html's help list read this."""

from __future__ import annotations

GLOSSARY: tuple[tuple[str, str], ...] = (
    (
        "step wall",
        "a step's span on one rank (ms): from where the profiler started it (step_trace_time.csv's Preparing "
        "before its first device event, or the db's STEP_TIME; else its first device event) to its last device "
        "event; a rank without device events takes step_trace_time.csv's Stage",
    ),
    (
        "head / main / tail",
        "a step cut at its decoder layers: head before the first layer, main from the first layer to the last, "
        "tail after it (optimizer, loss, communication); they add up to the step wall",
    ),
    ("busy", "time with at least one device kernel or communication op running"),
    (
        "device idle (idle_ms, idle_share)",
        "the step wall minus its busy time: the device waits for work (host, data, sync); the CSVs call it "
        "underfeed_ms and underfeed_ratio (bubble_ratio_mean per step class)",
    ),
    ("bubble window", "one stretch of device idle inside a step, with the kernels on both sides as evidence"),
    (
        "exposed communication",
        "communication with no compute beside it on the rank: the step waits for it; overlapped communication is "
        "hidden behind compute and costs nothing",
    ),
    (
        "bound family",
        "what limits a kernel, from its PMU pipeline times: cube (matrix units), vector, aic_mte / aiv_mte "
        "(memory transfer on the cube / vector core), scalar, mixed, aicpu, communication",
    ),
    ("rank_duration_skew_ratio", "(max − min) / mean of an operator's total time over ranks: 0 when ranks agree"),
    ("rank_skew_ratio", "the same spread for a communication kind's mean call time over ranks"),
    ("call family", "every call of one HCCL kind in one group (hcom_allReduce__503_*): HCCL names each call"),
    (
        "recoverable time",
        "how much shorter the mean step would be without a finding's cause, from replaying the step with the cause "
        "removed (recoverable_ms_per_step); severity follows its share of the step",
    ),
    ("PP bubble", "a pipeline stage's idle plus its exposed P2P wait, beside the (p − 1) / (m + p − 1) of 1F1B"),
    ("MFU", "cube FLOPs from kernel shapes over the step wall, against the hardware's theoretical peak"),
    ("step#N", "in an evidence id, the N-th step of that rank in capture order; texts name steps by captured id"),
)


def glossary_markdown() -> str:
    """The glossary as a markdown list."""
    return "".join(f"- **{term}**: {text}\n" for term, text in GLOSSARY)
