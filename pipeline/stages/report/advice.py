"""Sentences of report.md that tell a reader what to do with a number: what every finding fixed at once
gives, and how to have the layer count checked where no config says what to expect."""

from __future__ import annotations

from npuprof.pipeline.mdtext import cell, code, share_text
from npuprof.pipeline.stages.report.inputs import ReportInputs


def fingerprint_hint(inputs: ReportInputs, summary: dict) -> str:
    """Where no config says how many layers to expect but the kernels' fingerprint names a model: what
    it names, what the ranks' layers add up to, and how to have it checked."""
    if summary["layer_validation"]["expected_layers"] is not None:
        return ""
    brief = summary.get("model_brief") or {}
    model, layers = brief.get("best_candidate"), ((brief.get("fields") or {}).get("num_hidden_layers") or {})
    if not model or layers.get("value") is None:
        return ""
    totals = (inputs.manifest("segment").get("layer_validation") or {}).get("observed_total_layers") or []
    stages = (inputs.manifest("segment").get("layer_validation") or {}).get("pipeline_stages") or 1
    added = f", as the {stages} pipeline stages' layers add up to" if stages > 1 and layers["value"] in totals else ""
    return (
        f" The kernels' fingerprint is closest to {cell(model)} with {cell(layers['value'])} decoder layers{added}: "
        f"{code(f'--model-id {model}')} (or its config.json beside the capture) would check the count against it."
    )


def all_findings_together(together: dict | None, total: int) -> str:
    """What fixing every finding at once gives, replayed together, against the plain sum."""
    if not together or total < 2 or together.get("ms_per_step") is None:
        return ""
    saved, summed = together["ms_per_step"], together["sum_ms_per_step"]
    share = (
        f" ({share_text(together['share_of_step'])} of the step)" if together.get("share_of_step") is not None else ""
    )
    relation = (
        "the findings overlap"
        if saved < summed - 0.005
        else "fixing one lets another save more"
        if saved > summed + 0.005
        else "they do not overlap"
    )
    return (
        f"All {total} findings fixed together: {saved:.2f} ms per step{share}, replayed at once; "
        f"their estimates add up to {summed:.2f} ms ({relation})."
    )
