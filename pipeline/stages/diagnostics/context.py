"""What detectors read: the tables of earlier stages by name, loaded on first use, once.

The diagnostics stage builds a ``DiagnosisContext`` over an output dir; a detector reads
``ctx.steps``, ``ctx.alignment`` ... and only the inputs some registered detector declares are ever
loaded, projected to the columns the detectors declare. Tests build a context from frames by name
(``DiagnosisContext.from_frames``), so a detector is tested without an output dir.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import pandas as pd

from npuprof.pipeline import io, schema
from npuprof.pipeline.io import int_ranks
from npuprof.pipeline.stages.diagnostics.groups import incomplete_instances
from npuprof.pipeline.stages.diagnostics.registry import declared_columns, derived_inputs, detectors
from npuprof.pipeline.stages.diagnostics.retiming import (
    ALIGNMENT_COLUMNS,
    HEAD,
    LABEL_COLUMNS,
    MEASURED_TRANSIT,
    STEP_COLUMNS,
    build_step_model,
)
from npuprof.pipeline.stages.diagnostics.slow_card import CARD_PROFILE_READS, card_profile
from npuprof.pipeline.stages.diagnostics.step_tags import STEP_TAG_COLUMNS, step_anomaly_tags
from npuprof.pipeline.stages.diagnostics.streams import BESIDE
from npuprof.pipeline.summaries.communication import captured_group_ranks

if TYPE_CHECKING:
    from npuprof.pipeline.stages.base import RootContext
    from npuprof.pipeline.stages.diagnostics.detectors.fusible_ops import SequenceWindows
    from npuprof.pipeline.stages.diagnostics.detectors.loss_chain import LossChains
    from npuprof.pipeline.stages.diagnostics.findings import Finding
    from npuprof.pipeline.stages.diagnostics.retiming import StepModel


def _table(table: schema.Table) -> Callable[[RootContext, tuple[str, ...] | None], pd.DataFrame]:
    def load(ctx: RootContext, columns: tuple[str, ...] | None) -> pd.DataFrame:
        if columns is None or not (ctx.out_dir / table.path).exists():
            return int_ranks(ctx.read_frame(table))
        wanted = [c for c in table.columns if c in columns]
        if table.per_rank:
            return int_ranks(ctx.read_table(table, columns=wanted).to_pandas())
        return int_ranks(pd.read_parquet(ctx.out_dir / table.path, columns=wanted))

    return load


def _steps(ctx: RootContext, columns: tuple[str, ...] | None) -> pd.DataFrame:
    frames = [ctx.read_frame(t) for t in schema.STEP_SUMMARY.tables]
    return int_ranks(schema.join_view(schema.STEP_SUMMARY, frames))


def _group_ranks(ctx: RootContext, columns: tuple[str, ...] | None) -> dict[str, list[int]]:
    return captured_group_ranks(io.read_json_or_empty(ctx.out_dir / schema.CAPTURE_INFO))


BLOCK_READS = ("rank_id", "block_kind", "start_us", "end_us")


def _blocks(ctx: RootContext, columns: tuple[str, ...] | None) -> pd.DataFrame:
    return _table(schema.BLOCK_SEGMENTS)(ctx, BLOCK_READS)


def _hardware(ctx: RootContext, columns: tuple[str, ...] | None) -> dict:
    return io.read_json_or_empty(ctx.out_dir / schema.HARDWARE_INSIGHTS)


# Inputs read straight from earlier stages' artifacts; detector modules add derived ones.
BASE_INPUTS: dict[str, Callable[[RootContext, tuple[str, ...] | None], Any]] = {
    "alignment": _table(schema.COLLECTIVE_ALIGNMENT),  # instance × rank on the common clock
    "units": _table(schema.CROSS_RANK_ALIGNMENT),  # collective / step / layer units
    "steps": _steps,  # step_summary: wall, idle measurements, layer counts per rank and step
    "accounting": _table(schema.STEP_TIME_ACCOUNTING),
    "operators": _table(schema.OPERATOR_SUMMARY),  # per rank
    "links": _table(schema.COMMUNICATION_LINKS),  # communication_matrix.json
    "bubbles": _table(schema.BUBBLE_WINDOWS),
    "freq_samples": _table(schema.AICORE_FREQ),  # AI Core frequency samples per rank
    "group_ranks": _group_ranks,  # group hash → global ranks (profiler_metadata)
    "hardware": _hardware,  # hardware_insights.json: the chosen SoC and its clock
    # the step ledger as the first findings explain it (ledger.py): the diagnostics stage provides it to
    # the ledger-phase detectors; read from disk, it is the ledger the last run wrote
    "ledger": _table(schema.STEP_LEDGER),
    # the findings phase's findings (Finding objects, with their replays): the stage provides them to the
    # ledger-phase detectors; without the stage there are none
    "first_findings": lambda ctx, columns: [],
    "comm_events": _table(schema.COMMUNICATION_EVENTS),  # per rank: every communication event
    "comm_ops": _table(schema.COMMUNICATION_OPS),  # per rank: communication.json's ops
    "blocks": _blocks,  # per rank: each block's kind and span (where a cut kernel's time is booked)
}

# Inputs built from other inputs (so a context over frames builds them too): name → (the inputs and
# columns they read, builder).
COMPOSED_INPUTS: dict[str, tuple[dict[str, tuple[str, ...]], Callable[["DiagnosisContext"], Any]]] = {
    "step_model": (
        {
            "alignment": (*ALIGNMENT_COLUMNS, BESIDE, *LABEL_COLUMNS, MEASURED_TRANSIT, "name"),
            "steps": (*STEP_COLUMNS, HEAD),
            "comm_ops": ("rank_id", "op_name", "group_hash"),
            "links": ("group_hash", "src_local_rank", "dst_local_rank"),
        },
        lambda ctx: build_step_model(
            ctx.alignment,
            ctx.steps,
            incomplete_instances(ctx.alignment, ctx.comm_ops, ctx.links, ctx.group_ranks),
        ),
    ),  # the replay of the steps that prices each finding (retiming.py)
    "step_tags": (
        {"steps": STEP_TAG_COLUMNS},
        lambda ctx: step_anomaly_tags(ctx.steps),
    ),  # anomaly tags and their wording per step (step_tags.py)
    "card_profile": (CARD_PROFILE_READS, card_profile),  # every rank's measures per step (slow_card.py)
}


def with_composed_reads(columns: dict[str, tuple[str, ...] | None]) -> dict[str, tuple[str, ...] | None]:
    """The declared columns plus those the composed inputs some detector reads need."""
    merged = dict(columns)
    for name, (reads, _) in COMPOSED_INPUTS.items():
        if name not in columns:
            continue
        for source, needed in reads.items():
            if source not in merged:
                merged[source] = needed
            elif merged[source] is not None:
                merged[source] = tuple(sorted({*merged[source], *needed}))
    return merged


class DiagnosisContext:
    """The inputs of the registered detectors, by name, loaded lazily and cached. Each is declared below
    with its type, so an editor and a type checker see what ``ctx.steps`` is (``__getattr__`` loads it;
    a test keeps the declarations and the known inputs the same)."""

    # earlier stages' tables and facts (BASE_INPUTS)
    accounting: pd.DataFrame
    alignment: pd.DataFrame
    blocks: pd.DataFrame
    bubbles: pd.DataFrame
    comm_events: pd.DataFrame
    comm_ops: pd.DataFrame
    first_findings: list[Finding]
    freq_samples: pd.DataFrame
    group_ranks: dict[str, list[int]]
    hardware: dict
    ledger: pd.DataFrame
    links: pd.DataFrame
    operators: pd.DataFrame
    steps: pd.DataFrame
    units: pd.DataFrame
    # composed from the inputs above (COMPOSED_INPUTS)
    card_profile: pd.DataFrame
    step_model: StepModel
    step_tags: pd.DataFrame
    # what detector modules derive for themselves (@derived_input)
    aicpu_exposure: pd.DataFrame
    compute_work: pd.DataFrame
    copies_in_steps: pd.DataFrame
    core_counts: dict[int, dict[str, int | None]]
    data_moves: pd.DataFrame
    expert_calls: pd.DataFrame
    framework_launches: pd.DataFrame | None
    forward_gaps: pd.DataFrame
    forward_host_gaps: pd.DataFrame
    forwards: pd.DataFrame
    graph_replays: pd.DataFrame
    host_gaps: pd.DataFrame
    idle_by_cause: pd.DataFrame
    kernel_calls: pd.DataFrame
    launch_floor: dict[int, float]
    launch_widths: pd.DataFrame
    layer_spans: pd.DataFrame
    loss_chains: LossChains
    matmul_shapes: pd.DataFrame
    micro_batch_size: dict
    model_fields: dict[str, float]
    padded_forwards: pd.DataFrame
    pp_schedule: pd.DataFrame
    rank_env: dict[int, dict[str, str]]
    sequence_windows: SequenceWindows
    slow_matmul_calls: pd.DataFrame
    throttled_kernels: pd.DataFrame
    unfused_chains: pd.DataFrame

    def __init__(self, root: RootContext | None, frames: dict[str, Any] | None = None) -> None:
        self._root = root
        self._loaded: dict[str, Any] = dict(frames or {})
        self._columns = with_composed_reads(declared_columns(detectors()))
        # checks a detector could not make, and why (the data they need is missing): finding type → reason
        self.not_judged: dict[str, str] = {}

    @classmethod
    def from_frames(cls, frames: dict[str, Any]) -> "DiagnosisContext":
        """A context over given inputs (tests); an input not given is empty."""
        return cls(None, frames)

    def provide(self, name: str, value: Any) -> None:
        """Hand the context an input computed during the stage (the first findings' ledger)."""
        self._loaded[name] = value

    def not_judging(self, finding_type: str, reason: str) -> None:
        """Record that ``finding_type`` was not judged (on some ranks or all) and what would let it be: the
        report says so instead of letting silence read as a clean bill."""
        self.not_judged[finding_type] = reason

    def known(self) -> set[str]:
        return {*BASE_INPUTS, *COMPOSED_INPUTS, *derived_inputs()}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._loaded:
            self._loaded[name] = self._load(name)
        return self._loaded[name]

    def _load(self, name: str) -> Any:
        if name not in self.known():
            raise AttributeError(f"no diagnosis input called {name!r}; known: {', '.join(sorted(self.known()))}")
        if name in COMPOSED_INPUTS:
            return COMPOSED_INPUTS[name][1](self)
        if self._root is None:
            return {} if name in ("group_ranks", "hardware") else pd.DataFrame()
        columns = self._columns.get(name)
        if name in BASE_INPUTS:
            value = BASE_INPUTS[name](self._root, columns)
        else:
            value = derived_inputs()[name].load(self._root)
        if isinstance(value, pd.DataFrame) and columns is not None and len(value.columns):
            missing = [c for c in columns if c not in value.columns]
            if missing:
                raise KeyError(f"diagnosis input {name!r} lacks the declared columns {missing}")
        return value
