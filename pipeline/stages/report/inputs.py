"""What the renderers read, loaded once by the report stage (renderers never open files)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd


@dataclass
class ReportInputs:
    """Manifests, findings and tables of one analyzed root. A table a stage did not write is empty."""

    out_dir: str
    mode: str  # fast | full
    manifests: dict[str, dict]  # by stage name; "top" for manifest.json
    findings: list[dict]
    steps: pd.DataFrame  # step_summary
    anatomy: pd.DataFrame  # step_anatomy (long: one row per step window)
    accounting: pd.DataFrame  # step_time_accounting (long)
    ranks: pd.DataFrame  # rank_summary
    step_classes: pd.DataFrame
    layer_classes: pd.DataFrame
    block_classes: pd.DataFrame
    operator_classes: pd.DataFrame
    hccl_classes: pd.DataFrame
    evidence: pd.DataFrame  # the evidence_index rows the findings cite (the index itself can be huge)
    layers: pd.DataFrame = field(default_factory=pd.DataFrame)  # layer_segments (timeline spans)
    events: pd.DataFrame = field(default_factory=pd.DataFrame)  # device events for the trace (capped)
    model_insights: dict = field(default_factory=dict)  # summarize's model_insights.json
    hardware: dict = field(default_factory=dict)  # summarize's hardware_insights.json
    inferred_config: pd.DataFrame = field(default_factory=pd.DataFrame)  # model_inferred_config
    candidates: pd.DataFrame = field(default_factory=pd.DataFrame)  # model_candidate_summary
    peaks: pd.DataFrame = field(default_factory=pd.DataFrame)  # hardware_theoretical_peaks
    efficiency: pd.DataFrame = field(default_factory=pd.DataFrame)  # operator_efficiency_summary
    annotations: list[dict] = field(default_factory=list)  # diagnostics' evidence_annotations
    together: dict = field(default_factory=dict)  # diagnostics' recoverable_together (every finding at once)
    rules_overridden: dict = field(default_factory=dict)  # rules a re-asked analysis set (npuprof diagnose)
    not_judged: list = field(default_factory=list)  # checks that lacked their data: finding_type, reason
    capture_health: list = field(default_factory=list)  # idle captures and warm-up steps (capture_health.py)
    step_trace: pd.DataFrame = field(default_factory=pd.DataFrame)  # step_trace_accounting (no-kernel ranks)
    pp_schedule: pd.DataFrame = field(default_factory=pd.DataFrame)  # pp_schedule (pipeline parallel only)
    pp_passes: pd.DataFrame = field(default_factory=pd.DataFrame)  # each PP stage's F / B passes (pp_chart)
    idle_causes: pd.DataFrame = field(default_factory=pd.DataFrame)  # idle ms by cause per step (evidence)
    evidence_kinds: dict[str, int] = field(default_factory=dict)  # evidence_index rows by kind
    ledger: pd.DataFrame = field(default_factory=pd.DataFrame)  # step_ledger (diagnostics): every ms explained

    def manifest(self, stage: str) -> dict:
        """A stage's manifest, or {} when the stage did not run."""
        return self.manifests.get(stage) or {}
