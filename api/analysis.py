"""``Analysis(out_dir)``: the outputs of one analyzed root as DataFrames, for notebooks."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from npuprof.pipeline import csv_formulas, io, schema


class Analysis:
    """Read-only view of one ``npuprof analyze`` output directory."""

    def __init__(self, out_dir: str | Path) -> None:
        self.out_dir = Path(out_dir)
        if not (self.out_dir / schema.stage_manifest_name("normalize")).exists():
            raise FileNotFoundError(
                f"{self.out_dir} holds no completed npuprof analysis (normalize_manifest.json missing)"
            )

    def events(self, rank_id: int | None = None) -> pd.DataFrame:
        """Normalized device events: one row per kernel / communication op.

        Columns (see ``npuprof.pipeline.schema.EVENT_SCHEMA``): rank_id, source_id and row_idx (the
        evidence anchor back to the source file's data row), step_id, name, type,
        accelerator_core, op_type, start_ns / end_ns / duration_ns / wait_ns (int64 ns), block
        dims, shapes, dtypes, formats, the 11 pipeline fields in µs (null when not captured),
        categories, roles.
        """
        if rank_id is not None:  # a rank without events reads as none; a rank not in the root is an error
            known = [r["rank_id"] for r in self.manifest("normalize")["rank_summaries"]]
            if rank_id not in known:
                raise KeyError(f"no rank {rank_id} in {self.out_dir}; its ranks: {', '.join(map(str, known))}")
        table = io.read_dataset(self.out_dir, schema.NORMALIZED_EVENTS, rank_id)
        frame = table.to_pandas()
        if rank_id is not None:
            frame.insert(0, "rank_id", rank_id)
        return frame

    def _view(self, view: schema.CsvView, stage: str, text: tuple[str, ...] = ()) -> pd.DataFrame:
        path = self.out_dir / view.file
        if not path.exists():
            raise FileNotFoundError(
                f"{path} is missing: run the {stage} stage (npuprof analyze ... --from-stage {stage})"
            )
        return csv_formulas.read_csv_view(path, dtype={column: str for column in text})

    def steps(self) -> pd.DataFrame:
        """One row per step and rank: step_id, complete, layer counts (forward / backward / recompute /
        speculative), passes (micro-batches), evidence rows and times, wall / busy / bubble metrics,
        step_class_id, gaps to the neighbouring steps (anomaly tags: ``step_anomalies``)."""
        return self._view(schema.STEP_SUMMARY, "classify")

    def step_anomalies(self) -> pd.DataFrame:
        """One row per step and rank: anomaly_tags and anomaly_text, decided by diagnostics from the
        step measurements and the thresholds of knowledge/diagnosis_rules.yaml."""
        return self._view(schema.STEP_ANOMALIES_CSV, "diagnostics")

    def ledger(self) -> pd.DataFrame:
        """The step ledger: per rank and step, every ms of the step's wall on exactly one line (compute
        by block, compute under communication, exposed communication by role, kind and part, idle by
        cause), with what explains it: a finding's claim_id (and its type and ranks: a peer's wait is
        blamed on the rank that caused it), ``expected:<reason>`` or ``unexplained``."""
        return self._view(schema.STEP_LEDGER_CSV, "diagnostics", text=("explained_by", "blamed_ranks"))

    def layers(self) -> pd.DataFrame:
        """One row per layer instance: step, pass_index, layer_index, layer_role, anchor kernel,
        evidence rows and times, block_kinds, layer_class_id, time metrics."""
        return self._view(schema.LAYER_SUMMARY, "classify")

    def blocks(self) -> pd.DataFrame:
        """One row per block (attention / ffn / moe ...) of every layer, with class ids and metrics."""
        return self._view(schema.BLOCK_SUMMARY, "classify")

    def step_anatomy(self) -> pd.DataFrame:
        """Head / main / tail windows of every step with wall, busy and bubble time."""
        return self._view(schema.STEP_ANATOMY_CSV, "classify")

    def operators(self, merged: bool = False) -> pd.DataFrame:
        """One row per kernel (name, type, op_type) and rank, heaviest first: call_count, duration and
        wait sums (µs), wait_ratio, stream_count, evidence rows (row_start / row_end / sample_rows),
        bound_stage / bound_family / dominant_core and the 11 pipeline sums. ``merged=True``: one row
        per kernel over all ranks, with rank_duration_min / max / p50_us and rank_duration_skew_ratio."""
        view = schema.OPERATOR_CLASS_SUMMARY_CSV if merged else schema.OPERATOR_SUMMARY_CSV
        return self._view(view, "summarize")

    def communication(self, merged: bool = False) -> pd.DataFrame:
        """Communication ops per (kind, comm_aiv_fused, parallel_role, rank): calls, duration statistics
        (µs), wait. ``merged=True``: per (kind, fused, role) over ranks, with rank_skew_ratio and the
        ranks with the longest (max_avg_rank) and shortest (min_avg_rank) mean duration."""
        view = schema.HCCL_CLASS_SUMMARY_CSV if merged else schema.HCCL_OP_SUMMARY_CSV
        return self._view(view, "summarize")

    def time_accounting(self) -> pd.DataFrame:
        """Where each step's wall time goes (long format): breakdown ``primary`` rows (compute by
        bound family, exposed communication by kind, overlap, idle by prelaunch / internal / tail)
        add up to wall_ms; ``comm_by_role``, ``comm_by_role_kind`` and ``compute_by_op_type`` re-split one category."""
        return self._view(schema.STEP_TIME_ACCOUNTING_CSV, "summarize")

    def ranks(self) -> pd.DataFrame:
        """One row per rank: step wall quantiles, busy time, bubble / compute / communication /
        overlap shares, bubble recurrence and the dominant idle pattern."""
        return self._view(schema.RANK_SUMMARY_CSV, "summarize")

    def alignment(self, collectives: bool = False) -> pd.DataFrame:
        """Cross-rank alignment: one row per collective instance, step id and layer (type, members,
        start / end skew on the corrected clock, duration spread, first and last rank); with
        ``collectives=True``, one row per (collective instance, rank) with its corrected times,
        arrival order and the wait it had for the last member."""
        if collectives:
            path = self.out_dir / schema.COLLECTIVE_ALIGNMENT.path
            if not path.exists():
                raise FileNotFoundError(f"{path} is missing: run the cross_rank stage")
            return pd.read_parquet(path)
        return self._view(schema.CROSS_RANK_ALIGNMENT_CSV, "cross_rank")

    def findings(self) -> pd.DataFrame:
        """One row per finding: claim_id, finding_type, scope, severity, confidence, summary,
        rank_ids and evidence_ids (lists), statistic name / value / threshold, limitations, and the time
        fixing it would recover (ms per step and share of the mean step)."""
        path = self.out_dir / schema.DIAGNOSIS_FINDINGS
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: run the diagnostics stage")
        return findings_frame(io.read_json(path)["diagnosis_findings"])

    def diagnose(self, finding_type: str | None = None, rules: dict | None = None, **overrides) -> pd.DataFrame:
        """The detectors asked again over this analysis's tables, in memory (nothing is written): the
        findings (as ``findings()``) of ``finding_type`` (all when None) with rule values set for this
        call — ``overrides`` are keys of that finding's rules (``diagnose("slow_rank_suspected",
        robust_z_min=3.0)``), ``rules`` dotted keys of diagnosis_rules.yaml (``{"evidence_sample": 3}``).
        A key the rules do not hold is an error naming the keys they do."""
        from npuprof.pipeline.rediagnose import rediagnose

        if overrides and finding_type is None:
            raise ValueError("keyword overrides need a finding_type (or pass dotted keys as rules={...})")
        settings = {**(rules or {}), **{f"{finding_type}.{key}": value for key, value in overrides.items()}}
        found = rediagnose(self.out_dir, settings, write=False)["diagnosis_findings"]
        return findings_frame([f for f in found if finding_type in (None, f["finding_type"])])

    def manifest(self, stage: str | None = None) -> dict:
        """The top-level manifest, or one stage's manifest."""
        name = schema.TOP_MANIFEST if stage is None else schema.stage_manifest_name(stage)
        return io.read_json(self.out_dir / name)

    def capture_info(self) -> dict:
        """How each rank was captured (profiler level, metrics, versions, parallel groups)."""
        return io.read_json(self.out_dir / schema.CAPTURE_INFO)

    def model(self) -> dict[str, pd.DataFrame]:
        """The profile-derived model: ``inferred_config`` (field, value, confidence, evidence kernel /
        shapes / rank:row), ``features``, ``layer_types``, ``candidates`` (catalog models ranked by
        agreement), and — when a config.json was given — ``config_overview``, ``parameters``, ``kv_cache``."""
        tables = {
            "inferred_config": schema.MODEL_INFERRED_CONFIG_CSV,
            "features": schema.MODEL_FEATURE_SUMMARY_CSV,
            "layer_types": schema.MODEL_LAYER_TYPE_SUMMARY_CSV,
            "candidates": schema.MODEL_CANDIDATE_SUMMARY_CSV,
        }
        optional = {
            "config_overview": schema.MODEL_CONFIG_OVERVIEW_CSV,
            "parameters": schema.MODEL_PARAMETER_ESTIMATE_CSV,
            "kv_cache": schema.MODEL_KV_CACHE_ESTIMATE_CSV,
        }
        found = {name: self._view(view, "summarize") for name, view in tables.items()}
        found.update(
            {
                name: csv_formulas.read_csv_view(self.out_dir / v.file)
                for name, v in optional.items()
                if (self.out_dir / v.file).exists()
            }
        )
        return found

    def efficiency(self) -> dict[str, pd.DataFrame]:
        """Hardware and roofline: ``hardware`` (name, how it was chosen, sources), ``peaks`` (theoretical
        and sustained per unit and dtype), ``operators`` (per kernel + shapes: FLOPs, bytes, intensity,
        achieved TFLOPS / GB/s, roofline bound, reclaimable µs, MFU) and ``steps`` (MFU per rank and step)."""
        return {
            "hardware": self._view(schema.HARDWARE_SUMMARY_CSV, "summarize"),
            "peaks": self._view(schema.HARDWARE_THEORETICAL_PEAKS_CSV, "summarize"),
            "operators": self._view(schema.OPERATOR_EFFICIENCY_SUMMARY_CSV, "summarize"),
            "steps": self._view(schema.STEP_EFFICIENCY_CSV, "summarize"),
        }

    def compare(self, other: str | Path | Analysis) -> dict[str, pd.DataFrame]:
        """This capture (the baseline) against ``other`` (the new one): the comparison tables by name
        (``compare_overview.csv``, ``compare_step_classes.csv`` …, see ``npuprof compare``); nothing is written."""
        from npuprof.pipeline.compare.run import compare_tables, structure
        from npuprof.pipeline.compare.sides import load_side
        from npuprof.pipeline.errors import UsageError

        base = load_side(self.out_dir)
        new = load_side(other.out_dir if isinstance(other, Analysis) else other)
        shape = structure(base, new)
        if not shape["same_model"]:
            raise UsageError(f"the two captures run different models: {shape['differing_fields']}")
        return compare_tables(base, new)


FINDING_COLUMNS = ["claim_id", "finding_type", "scope", "severity", "confidence", "summary", "rank_ids"]
FINDING_COLUMNS += ["evidence_ids", "statistic_name", "statistic_value", "statistic_threshold", "limitations"]
FINDING_COLUMNS += ["recoverable_ms_per_step", "recoverable_share_of_step"]


def findings_frame(findings: list[dict]) -> pd.DataFrame:
    """diagnosis_findings.json's findings as one row each (lists kept as lists)."""
    rows = [
        {
            **{k: f[k] for k in ("claim_id", "finding_type", "scope", "severity", "confidence", "summary")},
            "rank_ids": f["rank_ids"],
            "evidence_ids": f["evidence_ids"],
            "statistic_name": f["statistic"].get("name"),
            "statistic_value": f["statistic"].get("value"),
            "statistic_threshold": f["statistic"].get("threshold"),
            "limitations": f["limitations"],
            "recoverable_ms_per_step": f.get("recoverable_ms_per_step"),
            "recoverable_share_of_step": f.get("recoverable_share_of_step"),
        }
        for f in findings
    ]
    return pd.DataFrame(rows, columns=FINDING_COLUMNS)
