"""env_setting: an environment variable the capture records (torch_npu's ENV_VARIABLES) that is known to
cause a slowdown, where the capture shows that slowdown — a symptom finding on the same ranks. The
setting is priced as its symptom (the same replay): fixing the setting is what removes it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from npuprof.pipeline import io, schema
from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, priced, rule
from npuprof.pipeline.stages.diagnostics.registry import derived_input, detector

if TYPE_CHECKING:
    from npuprof.pipeline.stages.base import RootContext

FINDING = "env_setting"


@derived_input("rank_env")
def rank_env(ctx: RootContext) -> dict[int, dict[str, str]]:
    """Per rank, the environment variables its capture records (none where it records none)."""
    capture = io.read_json_or_empty(ctx.out_dir / schema.CAPTURE_INFO)
    return {int(rank["rank_id"]): dict(rank.get("env_variables") or {}) for rank in capture.get("ranks", [])}


def harmful(value: object, setting: dict) -> bool:
    """Whether a recorded ``value`` is one ``setting`` names as harmful (``bad`` values, "*" any value set;
    or, with ``unless_contains``, a value without that text)."""
    if not isinstance(value, str):
        return False
    if "unless_contains" in setting:
        return setting["unless_contains"] not in value
    return value in setting.get("bad", []) or ("*" in setting.get("bad", []) and value != "")


@detector(
    finding_types=(FINDING,),
    reads={"rank_env": (), "first_findings": (), "step_model": ()},
    phase="ledger",
)
def env_setting(inputs: DiagnosisContext) -> list[Finding]:
    """One finding per harmful setting and symptom it causes on the ranks that run with it."""
    spec, env = rule(FINDING), inputs.rank_env
    findings = []
    for variable, setting in spec["settings"].items():  # a loop over the settings the rules name
        values = {rank: found[variable] for rank, found in env.items() if harmful(found.get(variable), setting)}
        symptoms = [f for f in inputs.first_findings if f.finding_type in setting["symptoms"]]
        for symptom in symptoms:  # a loop over the findings it can cause
            ranks = sorted(set(symptom.rank_ids) & set(values))
            if ranks and symptom.what_if is not None:
                findings.append(_finding(inputs, variable, setting, values[ranks[0]], symptom, ranks))
    return findings


def _finding(
    inputs: DiagnosisContext, variable: str, setting: dict, value: str, symptom: Finding, ranks: list[int]
) -> Finding:
    """The finding of ``variable`` = ``value`` on ``ranks``, priced as ``symptom`` (its replay)."""
    cost = priced(inputs.step_model, symptom.what_if)
    return Finding(
        finding_type=FINDING,
        scope="rank",
        rank_ids=ranks,
        evidence_ids=list(symptom.evidence_ids),
        alignment_ids=list(symptom.alignment_ids),
        statistic={"name": "symptom_ms_per_step", "value": float(cost["recoverable_ms_per_step"]), "threshold": 0.0},
        values={
            "ranks": ranks,
            "variable": variable,
            "value_text": value if value != "" else '""',
            "why": setting["why"],
            "advice": setting["advice"],
            "symptom": symptom.finding_type,
            "explains_only": symptom.finding_type,
            "line": setting["line"],
            "ms_per_step": float(cost["recoverable_ms_per_step"]),
        },
        limitations=[
            "the setting is named as the symptom's likely cause from what it is known to do, not measured apart"
        ],
        **cost,
    )
