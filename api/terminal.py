"""What a person at a terminal reads after a command: a few lines on stderr (status, the step's biggest
costs, the findings most worth fixing with the time each would save, where the report is). Only when
stdout is a terminal; a pipe gets the JSON alone, as always."""

from __future__ import annotations

import sys
from pathlib import Path

from npuprof.pipeline import schema
from npuprof.pipeline.progress import end_open_bar
from npuprof.pipeline.terminal_text import printable

TOP_FINDINGS = 5


def _findings(summary: dict) -> list[str]:
    lines = []
    for group in summary.get("findings", [])[:TOP_FINDINGS]:
        saves, caused = group.get("recoverable_ms_per_step"), group.get("caused_ms_per_step")
        cost = f"saves ~{saves:.2f} ms/step" if saves is not None else "saving not estimated"
        if saves is None and caused is not None:
            cost = f"causes ~{caused:.2f} ms/step, not recoverable from this capture"
        lines.append(f"  - [{group['severity']}, {cost}] {group['summary']}")
        if group.get("remedy"):  # the first of what to try: the report holds the rest
            lines.append(f"    try: {_first_clause(group['remedy']['text'])}")
    return lines or ["  none"]


def _first_clause(text: str, most: int = 160) -> str:
    """The start of ``text`` up to its first sentence end, or ``most`` characters and "…"."""
    end = text.find(". ")
    head = text[: end + 1] if 0 < end < most else text
    return head if len(head) <= most else head[: most - 1].rstrip() + "…"


def _analysis(result: dict) -> list[str]:
    summary = result.get("analysis_summary") or {}
    out = Path(result.get("output_dir", "."))
    lines = [f"status: {result.get('status')} — {result.get('rank_count')} ranks, {result.get('event_count')} events"]
    headline = (summary.get("headline") or {}).get("text") or []
    if headline:
        lines += ["biggest costs of the step:", *(f"  {text}" for text in headline)]
    if summary:
        lines += [f"capture health: {item['text']}" for item in summary.get("capture_health", [])]
        lines += ["findings, most recoverable time first:", *_findings(summary)]
    reports = [out / name for name in (schema.REPORT_HTML, schema.REPORT_MD)]
    lines += [f"report: {path}" for path in reports if path.exists()]
    return lines


def _demo(result: dict) -> list[str]:
    """What was planted and how much of it was found; the findings themselves once, in the analysis."""
    demo = result["demo"]
    planted = demo.get("planted_findings", [])
    told = [
        f"{f['type']}"
        + (f" (rank {', '.join(map(str, f['ranks']))})" if f["ranks"] else "")
        + ("" if f["found"] else ": MISSED")
        for f in planted
    ]
    found = sum(f["found"] for f in planted)
    return [
        f"planted: {demo['planted']} (ground truth: {demo['ground_truth']})",
        f"found {found} of {len(planted)} planted findings: {'; '.join(told)}",
        *_analysis(result),
    ]


def _compare(result: dict) -> list[str]:
    wall = result.get("step_wall_ms") or {}
    return [
        f"{result.get('verdict')}: step wall {wall.get('baseline')} → {wall.get('new')} ms "
        f"({wall.get('delta')} ms per step), {result.get('significant_changes')} significant changes",
        f"details: {Path(result.get('output_dir', '.')) / schema.COMPARE_MD}",
    ]


def _sweep(result: dict) -> list[str]:
    outliers = result.get("outlier_roots") or []
    lines = [
        f"status: {result.get('status')} — {result.get('root_count')} roots, "
        f"{len(result.get('failed_roots') or [])} failed, {result.get('cohort_count', 0)} cohorts, "
        f"{len(outliers)} off their cohort",
    ]
    for title, items in (("fleet suspects:", result.get("fleet_suspects")), ("trends:", result.get("trends"))):
        if items:
            lines += [title, *(f"  - {text}" for text in items[:TOP_FINDINGS])]
    if result.get("not_written"):
        lines.append(f"not written: {result['not_written']}")
    # one path to open; the table behind it beside it, said as what it is
    if result.get("sweep_report"):
        lines.append(f"report: {result['sweep_report']} (every root's row: {result.get('rollup')})")
    else:
        lines.append(f"rollup: {result.get('rollup')}")
    return lines


def _diagnose(result: dict) -> list[str]:
    rules = ", ".join(f"{k}={v}" for k, v in result["rules_overridden"].items()) or "as in diagnosis_rules.yaml"
    together = result.get("recoverable_together_ms_per_step")
    lines = [
        f"{result['finding_count']} findings in {result['seconds']:.2f} s (rules: {rules})"
        + (f"; all together save ~{together:.2f} ms/step" if together is not None else ""),
        "findings shown, most recoverable time first:" if result["findings"] else "findings shown: none",
        *_findings({"findings": result["findings"]})[: len(result["findings"])],
    ]
    written = result.get("written_to")
    return lines + [f"written to: {written}" if written else "written: nothing (--dry-run)"]


RENDERERS = {"analyze": _analysis, "demo": _demo, "compare": _compare, "sweep": _sweep, "diagnose": _diagnose}


def print_result(command: str, result: dict, as_json: bool = False) -> None:
    """The command's result: at a terminal the lines a person reads (the JSON too with ``--json``, or
    when the command has no summary for this result); to a pipe, the one JSON object alone."""
    from npuprof.api.cli.options import print_json

    end_open_bar()  # a stage whose bar never reached its end (a merge) leaves its line open
    at_terminal = sys.stdout.isatty()
    if as_json or not at_terminal or not _has_summary(command, result):
        print_json(result)
    print_summary(command, result)


def _has_summary(command: str, result: dict) -> bool:
    if command not in RENDERERS or result.get("status") == "failed":
        return False
    return command != "compare" or "verdict" in result  # a sweep against its baseline: the JSON says it


def print_summary(command: str, result: dict) -> None:
    """The human summary of ``result`` on stderr, when stdout is a terminal and the command has one."""
    render = RENDERERS.get(command)
    if render is None or not sys.stdout.isatty() or not _has_summary(command, result):
        return
    lines = [printable(line) for line in render(result)]  # kernel names, paths: data, not escape codes
    sys.stderr.write("\n".join(f"npuprof {command}: {line}" if i == 0 else line for i, line in enumerate(lines)))
    sys.stderr.write("\n")
    sys.stderr.flush()
