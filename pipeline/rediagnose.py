"""Ask a finished analysis again: the diagnostics stage re-run over the tables on disk, with some of
``diagnosis_rules.yaml``'s values set for this run (``npuprof diagnose``, ``Analysis.diagnose``).

The stages before diagnostics are read, never written. In place, diagnostics and the report are
rewritten as a ``--from-stage diagnostics`` run would (each file atomically, the manifest last); with
a target dir, only the diagnostics outputs are written there and the analysis stays as it was; in
memory, nothing is written. Every finding a re-run writes says which rules it was asked with
(``rules_overridden`` in diagnosis_findings.json).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from npuprof import knowledge
from npuprof.pipeline import io, schema
from npuprof.pipeline.errors import UsageError
from npuprof.pipeline.options import AnalyzeOptions
from npuprof.pipeline.stage_range import StageRange, check_prerequisites
from npuprof.pipeline.stages import stage
from npuprof.pipeline.stages.base import RootContext

RULES = "diagnosis_rules"


def rule_overrides(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted ``diagnosis_rules.yaml`` keys from what a person types: a key that starts with a finding
    or annotation type is under its section (``slow_rank_suspected.min_ratio`` →
    ``findings.slow_rank_suspected.min_ratio``); any other is a path from the top."""
    rules = knowledge.load(RULES)
    resolved = {}
    for key, value in settings.items():
        head = key.split(".", 1)[0]
        section = next((s for s in ("findings", "annotations") if head in rules.get(s, {})), None)
        resolved[f"{section}.{key}" if section else key] = value
    return resolved


def _checked(out: Path) -> AnalyzeOptions:
    diagnostics = stage("diagnostics")
    if not (out / schema.TOP_MANIFEST).exists():
        raise UsageError(f"{out}: not an npuprof output dir (no {schema.TOP_MANIFEST}); run npuprof analyze first")
    check_prerequisites(out, [diagnostics])
    return AnalyzeOptions.from_dict(io.read_json(out / schema.TOP_MANIFEST).get("options", {}))


def rediagnose(
    out_dir: str | Path,
    overrides: Mapping[str, Any] | None = None,
    target: str | Path | None = None,
    *,
    write: bool = True,
) -> dict[str, Any]:
    """Re-run diagnostics on the analysis in ``out_dir`` with ``overrides`` (dotted keys of
    diagnosis_rules.yaml, as ``rule_overrides`` resolves them); returns diagnosis_findings.json's
    document. ``target``: write the diagnostics outputs there instead; ``write=False``: write nothing."""
    from npuprof.pipeline.execution import write_result
    from npuprof.pipeline.runner import analyze, load_inputs

    out = Path(out_dir)
    options = _checked(out)
    values = rule_overrides(overrides or {})
    try:
        with knowledge.overridden(RULES, values):
            if write and target is None:
                analyze(None, out, options=options, stage_range=StageRange(from_stage="diagnostics"))
                return io.read_json(out / schema.DIAGNOSIS_FINDINGS)
            started = time.perf_counter()
            current = stage("diagnostics")
            result = current.reduce_root(RootContext(out, load_inputs(out), options))
            if write:
                where = _target_dir(Path(target), out)
                write_result(where, current, result, rank_id=None)
                manifest = {"stage": "diagnostics", "read_from": str(out), "completed_at": io.utc_now()}
                manifest["seconds"] = round(time.perf_counter() - started, 4)
                io.write_json(where / current.manifest_name, {**manifest, **result.manifest})
            return result.json_files[schema.DIAGNOSIS_FINDINGS]
    except knowledge.OverrideError as exc:
        raise UsageError(str(exc)) from None


def _target_dir(target: Path, out: Path) -> Path:
    """A new or empty dir outside the analysis (its diagnostics outputs must not mix with another's)."""
    if target.resolve() == out.resolve() or out.resolve() in target.resolve().parents:
        raise UsageError(f"-o {target}: inside the analysis it re-asks; name a dir outside {out}")
    if target.exists() and any(target.iterdir()):
        raise UsageError(f"-o {target}: not empty; name a new or empty dir")
    target.mkdir(parents=True, exist_ok=True)
    return target


def finding_types_of(names: list[str]) -> set[str] | None:
    """The finding types ``names`` select (a detector's name selects the types it emits; a finding type
    itself); None for no names (every type). An unknown name is a usage error listing the known ones."""
    if not names:
        return None
    from npuprof.pipeline.stages.diagnostics.registry import detectors

    by_name = {item.name: set(item.finding_types) for item in detectors()}
    rules = knowledge.load(RULES)
    types = set(rules["findings"]) | set(rules["annotations"])
    unknown = [name for name in names if name not in by_name and name not in types]
    if unknown:
        known = ", ".join(sorted(by_name))
        raise UsageError(f"no detector or finding type {', '.join(unknown)}; detectors: {known}")
    return {t for name in names for t in by_name.get(name, {name})}


def diagnose_result(
    out_dir: str | Path,
    settings: Mapping[str, Any],
    detectors: list[str] | None = None,
    target: str | Path | None = None,
    write: bool = True,
) -> dict[str, Any]:
    """What ``npuprof diagnose`` prints: the findings of the selected detectors (all run), the rules
    set, where the outputs went, and how long it took."""
    selected = finding_types_of(list(detectors or []))
    started = time.perf_counter()
    document = rediagnose(out_dir, settings, target, write=write)
    shown = [f for f in document["diagnosis_findings"] if selected is None or f["finding_type"] in selected]
    keep = ("finding_type", "severity", "rank_ids", "summary", "statistic", "recoverable_ms_per_step")
    return {
        "status": "ok",
        "output_dir": str(out_dir),
        "written_to": None if not write else str(target if target is not None else out_dir),
        "rules_overridden": document.get("rules_overridden", {}),
        "finding_count": len(document["diagnosis_findings"]),
        "findings": [{k: f.get(k) for k in keep} for f in shown],
        "recoverable_together_ms_per_step": (document.get("recoverable_together") or {}).get("ms_per_step"),
        "seconds": round(time.perf_counter() - started, 3),
    }
