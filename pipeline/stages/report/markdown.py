"""report/report.md: the 15 sections of a readable report, from the summary and the tables.

Every name from the data (kernels, classes, paths) goes through ``cell``: it is untrusted text and
must neither break a table nor become markup or HTML. A section whose inputs are missing says so.
"""

from __future__ import annotations

import pandas as pd

from npuprof.pipeline.idle_cause_names import cause_names
from npuprof.pipeline.mdtext import cell, code, ms_text, share_text, table
from npuprof.pipeline.stages.diagnostics.findings import saves_nothing
from npuprof.pipeline.stages.report.advice import all_findings_together, fingerprint_hint
from npuprof.pipeline.stages.report.glossary import glossary_markdown
from npuprof.pipeline.stages.report.inputs import ReportInputs
from npuprof.pipeline.stages.report.ledger_view import rank_ledgers
from npuprof.pipeline.stages.report.serving_text import serving_markdown
from npuprof.pipeline.stages.report.summary import closest_candidate
from npuprof.pipeline.summaries.operators import by_kernel_total

# inline markup, table cells and HTML; the text is one line inside a paragraph or a table cell
TOP_HEAVY_STEPS = 8
TOP_FINDINGS = 24


def _missing(stage: str) -> str:
    return f"_Not available: the {stage} stage did not run or wrote no rows._\n"


def _by_severity(counts: dict) -> str:
    return ", ".join(f"{cell(k)} {v}" for k, v in counts["by_severity"].items())


def _headline(inputs: ReportInputs, summary: dict) -> str:
    headline = summary.get("headline") or {}
    if not headline.get("text"):
        return "_No step time accounting: no rank has device events in steps._\n"
    lines = [f"- {cell(text)}" for text in headline["text"]]
    text = f"Where the step goes ({cell(headline['basis'])}):\n\n" + "\n".join(lines) + "\n"
    return text + _ledger(inputs)


def _ledger(inputs: ReportInputs) -> str:
    """Each rank's costliest ledger lines, with what explains each and what fixing it gives."""
    ranks = rank_ledgers(inputs.ledger, inputs.findings)
    if not ranks:
        return ""
    parts = [
        "\nThe step ledger (`step_ledger.csv`: every ms of each step on one line, with what explains it; "
        "mean per complete step):\n"
    ]
    for rank in ranks:
        rows = pd.DataFrame(rank["lines"]).assign(
            ms_per_step=lambda f: f["ms_per_step"].round(3), share=lambda f: f["share"].map(share_text)
        )
        unexplained = share_text(rank["unexplained_share"])
        parts.append(
            f"\n**Rank {rank['rank_id']}**: step {rank['wall_ms']:.3f} ms, unexplained {unexplained}\n\n"
            + table(rows, ["line", "ms_per_step", "share", "explained_by"])
            + _more_lines(rank)
        )
    return "".join(parts)


def _more_lines(rank: dict) -> str:
    """'... and 23 more lines, 212.4 ms per step (26.2 %)' under a rank's costliest ledger lines."""
    if not rank["more_lines"]:
        return ""
    share = share_text(rank["more_ms"] / rank["wall_ms"]) if rank["wall_ms"] else "–"
    lines = _plural(rank["more_lines"], "more line")
    return f"\n… and {lines}, {rank['more_ms']:.1f} ms per step ({share}): `step_ledger.csv` holds every one.\n"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _left_out(kpis: dict) -> str:
    """'; warm-up step 10 left out' where the KPIs leave warm-up steps out."""
    ids = kpis.get("warmup_steps_left_out") or []
    return f"; warm-up step{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))} left out" if ids else ""


def _complete_steps(steps: pd.DataFrame) -> str:
    """'1 complete step (id 13) on 2 ranks': steps counted once however many ranks ran them."""
    complete = steps[steps["complete"].astype(bool)] if len(steps) else steps
    if complete.empty:
        return "no complete step"
    ids = sorted(int(i) for i in complete["step_id"].dropna().unique())
    named = f" (id{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids[:8]))}{', …' if len(ids) > 8 else ''})"
    count = len(ids) if ids else int(complete.groupby("rank_id").size().max())
    return (
        f"{_plural(count, 'complete step')}{named if ids else ''} on {_plural(complete['rank_id'].nunique(), 'rank')}"
    )


def _executive(inputs: ReportInputs, summary: dict) -> str:
    identity, kpis, counts = summary["identity"], summary["kpis"], summary["finding_counts"]
    wall = kpis["step_wall_ms"]
    lines = [
        f"**Status: {cell(summary['status'])}.** {_plural(int(identity['rank_count']), 'rank')}, "
        f"{cell(identity['event_count'])} device events over {cell(identity['capture']['wall_ms'])} ms of capture "
        f"(kernel source: {cell(identity['source'])}).",
        f"{_complete_steps(inputs.steps)}: step wall mean {cell(wall['mean'])} ms (p50 {cell(wall['p50'])}, "
        f"p90 {cell(wall['p90'])}{_left_out(kpis)}). "
        f"Share of the step: compute {share_text(kpis['compute_share_of_wall'])}, "
        f"exposed communication {share_text(kpis['comm_share_of_wall'])}, "
        f"device idle {share_text(kpis['bubble_share_of_wall'])}"
        f"{_idle_causes_inline(kpis['idle_share_by_cause'])}.",
        f"Findings: {counts['total']} ({_by_severity(counts) or 'none'})"
        + (f"; the {min(5, len(summary['findings']))} most recoverable:" if summary["findings"] else "."),
    ]
    for group in summary["findings"][:5]:
        label = f"**{cell(group['finding_type'])}** ({cell(group['severity'])}, {_saving(group)})"
        lines.append(f"- {label}: {cell(group['summary'])}")
    together = all_findings_together(summary.get("recoverable_together"), counts["total"])
    health = "".join(
        f"\n**Capture health ({cell(item['kind'])}):** {cell(item['text'])}.\n"
        for item in summary.get("capture_health", [])
    )
    return (
        "\n\n".join(lines[:3])
        + "\n"
        + health
        + "\n"
        + "\n".join(lines[3:])
        + "\n"
        + (f"\n{together}\n" if together else "")
    )


def _idle_causes_inline(shares: dict[str, float]) -> str:
    """' (by cause: launch 3.1 %, queued 0.4 %)': what the idle time was waiting for."""
    named = [f"{cell(cause)} {share_text(share)}" for cause, share in shares.items() if share]
    return f" (by cause: {', '.join(named)})" if named else ""


def _saving(group: dict) -> str:
    """'recovers 14.6 ms/step (9%)': what removing the cause saves per step, replayed."""
    saved, share = group.get("recoverable_ms_per_step"), group.get("recoverable_share_of_step")
    if saved is None and group.get("caused_ms_per_step") is not None:
        return f"causes {ms_text(group['caused_ms_per_step'])} ms/step, not recoverable from this capture"
    if saved is None:
        return "recoverable time not estimated"
    if saves_nothing(group):  # the step is held by something the fix does not touch: its limitations say what
        return "recovers nothing this capture can show (its limitations say why)"
    return f"recovers {ms_text(saved)} ms/step" + (f" ({share:.0%})" if share is not None else "")


def _capture(inputs: ReportInputs, summary: dict) -> str:
    validation = summary["layer_validation"]
    low, high = validation["detected_layers"]["min"], validation["detected_layers"]["max"]
    detected = "none" if low is None else f"{low:g}" if low == high else f"{low:g} to {high:g}"
    expected = (
        f"{validation['expected_layers']} from {validation['expected_source']}"
        if validation["expected_layers"] is not None
        else "not known (no config.json or --model-id)"
    )
    text = (
        f"Layer validation: **{cell(validation['status'])}** (expected layers: {cell(expected)}; detected per rank: "
        f"{cell(detected)}; hard errors {cell(validation['hard_error_count'])}, "
        f"interior islands {cell(validation['interior_island_total'])}).{fingerprint_hint(inputs, summary)}\n\n"
    )
    if inputs.steps.empty:
        return text + _missing("segment")
    per_rank = (
        inputs.steps.groupby("rank_id")
        .agg(
            steps=("step_ordinal", "size"),
            complete=("complete", "sum"),
            # a step runs each decoder layer once per micro-batch and direction: 14 layers, 56 passes
            layer_passes=("main_layer_count", "median"),
            wall_ms=("wall_ms", "sum"),
            busy_ms=("busy_ms", "sum"),
            idle_ms=("underfeed_ms", "sum"),  # one word for it in what people read (the CSVs keep theirs)
        )
        .reset_index()
    )
    ranks = inputs.manifest("segment").get("rank_summaries", [])
    held = {int(r["rank_id"]): r.get("decoder_layers_observed") for r in ranks}
    per_rank.insert(3, "layers", per_rank["rank_id"].map(held).astype(float))
    return text + table(per_rank, list(per_rank.columns))


def _timeline(inputs: ReportInputs, summary: dict) -> str:
    if inputs.steps.empty:
        return _missing("classify")
    anatomy = summary["kpis"]["step_anatomy_ms_mean"]
    heavy = inputs.steps.sort_values("wall_ms", ascending=False)
    if set(anatomy) <= {"head"}:  # no layers found: the whole step is its "head", which says nothing
        text = "No layers were found on any rank, so steps are not split into head, layers and tail.\n\n"
    else:
        text = "Anatomy means (ms): " + ", ".join(f"{cell(k)} {cell(v)}" for k, v in anatomy.items()) + "\n\n"
    text = serving_markdown(summary.get("serving")) + text + "Heaviest steps:\n\n"
    heavy = heavy.rename(columns={"underfeed_ratio": "idle_share"})
    text += table(heavy, ["rank_id", "step_id", "wall_ms", "busy_ms", "idle_share", "anomaly_tags"], TOP_HEAVY_STEPS)
    return text + "\n" + _idle_causes_table(inputs)


def _idle_causes_table(inputs: ReportInputs) -> str:
    """Device idle per rank by cause, ms per complete step (the idle_by_cause rows)."""
    causes, steps = inputs.idle_causes, inputs.steps
    if causes.empty:
        return "Device idle by cause: no rank has a readable trace_view.json (or --no-host-trace).\n"
    complete = steps[steps["complete"].astype(bool)] if steps["complete"].astype(bool).any() else steps
    counted = causes.merge(complete[["rank_id", "step_ordinal"]], on=["rank_id", "step_ordinal"])
    per_rank = counted.pivot_table(index="rank_id", columns="component", values="ms", aggfunc="sum", fill_value=0.0)
    per_rank = per_rank.div(complete.groupby("rank_id").size().reindex(per_rank.index), axis=0).round(3)
    order = [c for c in cause_names() if c in per_rank.columns]
    frame = per_rank[order].reset_index()
    return (
        "Device idle by cause, ms per step (`idle_by_cause` rows of `step_time_accounting.csv`; `copy`: "
        "the device ran a memory copy; `queued`: the next kernel was launched, the device waited on "
        "something else):\n\n" + table(frame, list(frame.columns))
    )


def _bound(inputs: ReportInputs, summary: dict) -> str:
    coverage = inputs.manifest("summarize").get("pipeline_coverage", {})
    families = summary["kpis"]["bound_family_wall_ms"]
    if not families:
        return _missing("summarize")
    share = coverage.get("event_share")
    text = f"{share:.1%} of the events carry PMU pipeline data.\n\n" if share is not None else ""
    frame = pd.DataFrame({"bound_family": list(families), "compute_ms": list(families.values())})
    return text + table(frame, ["bound_family", "compute_ms"])


def _fingerprint(inputs: ReportInputs) -> str:
    insights = inputs.model_insights
    if not insights:
        return _missing("summarize")
    known = inputs.inferred_config[inputs.inferred_config["confidence"] != "none"]
    text = (
        "Read from kernel shapes (no config.json needed); each value names the kernel, shapes and source row it "
        "came from. Fields the kernels do not show stay unknown.\n\n"
    )
    text += table(known, ["field", "value", "confidence", "evidence_kernel", "evidence_rank_row", "note"], 30)
    present = [k for k, v in insights.get("features", {}).items() if v.get("present")]
    text += f"\nFeatures present: {cell(', '.join(present) or 'none detected')}.\n\n"
    transformer = insights.get("transformer") or {"present": True}
    best = insights.get("best_candidate")
    agreeing = inputs.candidates[inputs.candidates["mismatched_count"] == 0] if len(inputs.candidates) else []
    if not transformer["present"]:
        text += f"Not read as a transformer ({cell(transformer.get('method'))}): no catalog model is named.\n\n"
    elif best:
        text += f"Closest known model: **{cell(best)}** (no field disagrees).\n\n"
    elif len(agreeing):
        text += (
            f"{len(agreeing)} catalog models agree on every visible field: the kernels show too little to tell "
            f"them apart (first: {cell(agreeing.iloc[0]['model'])}).\n\n"
        )
    elif closest_candidate(inputs.candidates, insights) is not None:
        first = closest_candidate(inputs.candidates, insights)
        text += (
            f"No catalog model agrees on every visible field; the closest is {cell(first['model'])} "
            f"(differs in {cell(first['mismatched_fields'])}).\n\n"
        )
    elif len(inputs.candidates):
        text += "No catalog model agrees on a width or count the kernels show: no model is named.\n\n"
    text += table(inputs.candidates, ["rank", "model", "status", "matched_count", "mismatched_fields"], 5)
    config = insights.get("config")
    if config:
        text += (
            f"\nconfig.json `{cell(config['path'])}`: {config['matches']} fields agree, mismatches: "
            f"{cell(', '.join(config['mismatches']) or 'none')} (model_config_overview.csv).\n"
        )
    return text


def _hardware(inputs: ReportInputs) -> str:
    hardware = inputs.hardware
    if not hardware:
        return _missing("summarize")
    mfu = hardware.get("mfu") or {}
    if not hardware.get("cube_tflops"):
        text = f"Hardware unknown (capture names: {cell(', '.join(hardware.get('capture_devices') or []) or 'none')}"
        text += f"; candidates: {cell(', '.join(hardware.get('candidates') or []) or 'none')}). "
        text += "FLOPs are counted from shapes; MFU and roofline need `--hardware-model`.\n"
        return text
    text = f"Hardware: **{cell(hardware['name'])}**, chosen by {cell(hardware['chosen_by'])}. "
    text += f"{cell(hardware.get('note'))}.\n\n"
    text += table(inputs.peaks, ["unit", "dtype", "theoretical", "measure", "sustained_factor", "sustained", "source"])
    text += (
        f"\nMFU per step (cube FLOPs from kernel shapes over step wall, against the {cell(mfu.get('dtype'))} "
        f"theoretical peak): mean {share_text(mfu.get('mean'))}, p50 {share_text(mfu.get('p50'))}, "
        f"max {share_text(mfu.get('max'))} "
        f"over {mfu.get('step_count', 0)} rank-steps (step_efficiency_summary.csv).\n"
    )
    return text


ROOFLINE_COLUMNS = (
    "type input_shapes call_count duration_avg_us achieved_tflops mfu roofline_bound roofline_efficiency "
    "reclaimable_ms flops_formula"
).split()


def _roofline(inputs: ReportInputs) -> str:
    if inputs.efficiency.empty:
        return _missing("summarize")
    frame = inputs.efficiency.copy()
    frame["reclaimable_ms"] = frame["reclaimable_us"] / 1000.0
    text = (
        "Per kernel and shapes (all ranks): FLOPs and bytes from shapes, achieved rate, the bound on the sustained "
        "roof, and the time above that roof (reclaimable)."
    )
    if frame["reclaimable_ms"].notna().any():
        frame = frame.sort_values("reclaimable_ms", ascending=False, kind="stable")
        text += " Top by reclaimable time:\n\n"
    else:  # no roof without the hardware: rank by the time spent instead of by a column of dashes
        frame = frame.assign(_total=frame["duration_avg_us"] * frame["call_count"])
        frame = frame.sort_values("_total", ascending=False, kind="stable")
        text += " The hardware is unknown (`--hardware-model`), so there is no roof; top by time spent:\n\n"
    return text + table(frame, ROOFLINE_COLUMNS, 12) + _above_roof(frame)


def _above_roof(frame: pd.DataFrame) -> str:
    """What an efficiency above 1 means, where kernels have one: the roof is off, not the kernel."""
    above = int((pd.to_numeric(frame["roofline_efficiency"], errors="coerce") > 1.0).sum())
    if not above:
        return ""
    return (
        f"\n{_plural(above, 'kernel shape')} ran faster than {'its' if above == 1 else 'their'} roof "
        "(roofline_efficiency above 1): the data came from the on-chip cache, or the bytes or FLOPs the "
        "shapes give overstate the work. No time is reclaimable there; the roof, not the kernel, is off.\n"
    )


def _classes(inputs: ReportInputs) -> str:
    if inputs.step_classes.empty:
        return _missing("summarize")
    return table(
        inputs.step_classes.sort_values("wall_ms_sum", ascending=False).rename(
            columns={"bubble_ratio_mean": "idle_share_mean"}
        ),
        [
            "step_class_id",
            "member_count",
            "wall_ms_mean",
            "wall_ms_p90",
            "head_ms_mean",
            "main_ms_mean",
            "tail_ms_mean",
            "idle_share_mean",
        ],
        10,
    )


def _layers_blocks(inputs: ReportInputs) -> str:
    if inputs.layer_classes.empty:
        return _missing("summarize")
    layers = table(
        inputs.layer_classes.sort_values("wall_ms_sum", ascending=False),
        ["layer_class_id", "layer_role", "block_kinds", "member_count", "wall_ms_mean", "wall_ms_p90"],
        10,
    )
    blocks = table(
        inputs.block_classes.sort_values("wall_ms_sum", ascending=False),
        ["block_class_id", "block_kind", "member_count", "wall_ms_mean", "comm_share_mean", "bound_family", "top_ops"],
        10,
    )
    return "Layer classes:\n\n" + layers + "\nBlock classes:\n\n" + blocks


def _operators(inputs: ReportInputs) -> str:
    ops = inputs.operator_classes
    if ops.empty:
        return _missing("summarize")
    compute = by_kernel_total(ops[~ops["op_type"].isin(["communication", "mix_comm_aiv"])])
    text = "Top compute operators (a kernel that runs on several core types: one row each, its total beside):\n\n"
    text += table(
        compute,
        [
            "name",
            "op_type",
            "bound_family",
            "call_count",
            "duration_sum_us",
            "all_cores_duration_sum_us",
            "rank_duration_skew_ratio",
        ],
        15,
    )
    if inputs.annotations:  # these ops rank high by cost, but their cost is waiting
        text += "\nLooks hot, is waiting (annotations, not findings):\n\n" + "".join(
            f"- {cell(a['summary'])} ({code(', '.join(a['evidence_ids']))})\n" for a in inputs.annotations[:10]
        )
    text += "\nHCCL by kind and role:\n\n" + table(
        inputs.hccl_classes.sort_values("duration_sum_us", ascending=False),
        [
            "kind",
            "parallel_role",
            "rank_count",
            "call_count",
            "duration_sum_us",
            "rank_skew_ratio",
            "max_avg_rank",
            "min_avg_rank",
        ],
        15,
    )
    return text


def _inventory(inputs: ReportInputs) -> str:
    if inputs.steps.empty:
        return _missing("segment")
    inventory = inputs.steps.groupby(["attention_family", "main_layer_count"], dropna=False).size().rename("steps")
    return table(inventory.reset_index(), ["attention_family", "main_layer_count", "steps"])


def _findings(summary: dict) -> str:
    asked = summary.get("rules_overridden") or {}
    said = ", ".join(f"{code(k)} = {cell(v)}" for k, v in asked.items())
    head = f"_Asked again (npuprof diagnose) with these rules set: {said}; the rest as in diagnosis_rules.yaml._\n"
    head = head if asked else ""
    unjudged = summary.get("not_judged", [])
    head += "".join(f"_Not judged: {code(item['finding_type'])} — {cell(item['reason'])}._\n" for item in unjudged)
    if not summary["findings"]:
        none = "_No findings: nothing crossed its threshold (thresholds in knowledge/detectors/*/rules.yaml)._\n"
        return head + ("\n" if head else "") + none
    parts = [head] if head else []
    for group in summary["findings"][:TOP_FINDINGS]:
        stat = group["statistic"]
        evidence = (
            "; ".join(
                f"{code(e['evidence_id'])} rank {e['rank_id']} rows {e['rows'][0]}–{e['rows'][1]}"
                for e in group["evidence_sample"]
            )
            or "none (see limitations)"
        )
        notes = ", ".join(f"{cell(r['title'])} ({code(r['ref'])})" for r in group["knowledge_refs"])
        parts.append(
            f"### {cell(group['finding_type'])} — {cell(group['severity'])}, {cell(group['confidence'])} confidence\n\n"
            f"{cell(group['summary'])}\n\n"
            f"- {_saving(group)} (the step replayed without the cause)\n"
            f"- statistic: {cell(stat.get('name'))} = {cell(stat.get('value'))} "
            f"(threshold {cell(stat.get('threshold'))})\n"
            f"- ranks: {', '.join(map(str, group['affected']['rank_ids']))}; occurrences: {group['occurrences']}\n"
            f"- evidence: {evidence}\n"
            + (f"- what to try: {cell(group['remedy']['text'])}\n" if group.get("remedy") else "")
            + (f"- limitations: {'; '.join(cell(x) for x in group['limitations'])}\n" if group["limitations"] else "")
            + (f"- read: {notes}\n" if notes else "")
            + "".join(
                f"- the same cost, also seen as {cell(m['finding_type'])}: {cell(m['summary'])}\n"
                for m in group.get("merged", [])
            )
        )
    return "\n".join(parts)


def _finding_inventory(summary: dict) -> str:
    counts = summary["finding_counts"]
    frame = pd.DataFrame({"finding_type": list(counts["by_type"]), "count": list(counts["by_type"].values())})
    return (
        table(frame, ["finding_type", "count"])
        + f"\nGroups shown: {counts['rollup_groups']}, not shown: {counts['rollup_overflow']}.\n"
    )


def _evidence_chain(inputs: ReportInputs) -> str:
    cited = {e for f in inputs.findings for e in f["evidence_ids"]}
    index = inputs.evidence
    resolved = int(index["evidence_id"].isin(cited).sum()) if len(index) else 0
    kinds = inputs.evidence_kinds
    return (
        f"{len(inputs.findings)} findings cite {len(cited)} evidence ids; {resolved} resolve in "
        f"`evidence_index.csv` (the diagnostics stage fails when one does not). The index holds "
        + ", ".join(f"{v} {cell(k)}" for k, v in kinds.items())
        + " rows, each with rank, source rows, time window and source file.\n"
    )


def report_markdown(inputs: ReportInputs, summary: dict) -> str:
    """The whole report.md."""
    sections = [
        ("Biggest Costs Of The Step", _headline(inputs, summary)),
        ("Executive Summary", _executive(inputs, summary)),
        ("Capture And Segmentation", _capture(inputs, summary)),
        ("Macro Step Timeline", _timeline(inputs, summary)),
        ("Pipeline Coverage And Bound Families", _bound(inputs, summary)),
        ("Profile-Derived Model Fingerprint", _fingerprint(inputs)),
        ("Hardware Peak And MFU Context", _hardware(inputs)),
        ("Step Class View", _classes(inputs)),
        ("Layer And Block View", _layers_blocks(inputs)),
        ("Operator View", _operators(inputs)),
        ("Operator Calculation And Roofline Estimates", _roofline(inputs)),
        ("Step Inventory", _inventory(inputs)),
        ("Cross-Rank And Anomaly Findings", _findings(summary)),
        ("Finding Inventory", _finding_inventory(summary)),
        ("Evidence Chain", _evidence_chain(inputs)),
        ("Limitations", "".join(f"- {cell(text)}\n" for text in summary["limitations"]) or "_none_\n"),
        ("Glossary", glossary_markdown()),
    ]
    title = f"# npuprof report: {cell(summary['identity']['profile_root'])}\n\n"
    return title + "\n".join(f"## {i}. {name}\n\n{body}" for i, (name, body) in enumerate(sections, start=1))
