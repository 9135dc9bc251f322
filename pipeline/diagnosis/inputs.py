"""Everything the detectors read, loaded once by the stage (detectors never open files)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd


@dataclass
class DiagnosisInputs:
    """The tables of earlier stages, all ranks, as DataFrames (``rank_id`` as int64)."""

    alignment: pd.DataFrame  # collective_alignment: instance × rank on the common clock
    units: pd.DataFrame  # cross_rank_alignment: collective / step / layer units
    steps: pd.DataFrame  # step_summary: wall, anomaly tags, layer counts per rank and step
    accounting: pd.DataFrame  # step_time_accounting
    operators: pd.DataFrame  # operator_summary (per rank)
    links: pd.DataFrame  # communication_links (communication_matrix.json)
    bubbles: pd.DataFrame  # bubble_windows
    expert_calls: pd.DataFrame  # GroupedMatmul events: rank_id, row_idx, input_shapes, duration_ns
    aicpu_exposure: pd.DataFrame  # per (rank, AI CPU op): duration and the part no AI core work masks
    group_ranks: dict[str, list[int]]  # group hash → global ranks (profiler_metadata)
    soft_labels: pd.DataFrame  # per bubble window: rank_id, duration_us, labels ('|'-joined); may be empty
