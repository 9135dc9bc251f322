"""The docs cannot drift from the tool: every command the README and docs/ show is run as written (its
placeholders filled with a real capture, synthetic roots and a local sweep), every ``python`` block runs,
and every flag a synopsis or a mention names is one its command's parser has. The service's commands
run against a real Redis and worker in tests/e2e/test_docs_service.py."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SAMPLES, run_cli
from helpers.doc_commands import DocCommand, doc_commands, inline_commands, python_blocks

from npuprof.api.cli import build_parser

pytestmark = pytest.mark.xdist_group("docs")  # one worker: the commands share their workspace

# run against the service by tests/e2e/test_docs_service.py; deploy's hosts by tests/e2e/test_deploy.py
SERVICE = {"submit", "status", "fetch", "cancel", "forget", "worker", "flower", "deploy"}
# what the commands' placeholders stand for: a synthetic pair, a local sweep of them, one of its roots
PLACEHOLDERS = ("BASELINE", "NEW", "ARCHIVE", "ROOT", "OUT")


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def _named(command: DocCommand) -> list[str]:
    """The npuprof commands a line names (a synopsis may list several: ``npuprof submit | status | …``)."""
    argv = command.argv
    if len(argv) > 2 and argv[2] == "|":
        return [t for t in argv[1 : next((i for i, t in enumerate(argv) if t.startswith("(")), len(argv))] if t != "|"]
    return [argv[1]] if len(argv) > 1 and not argv[1].startswith("-") and not argv[1].isupper() else []


def _documented() -> list[DocCommand]:
    return [c for c in doc_commands() + inline_commands() if c.argv[:1] == ["npuprof"]]


def test_every_flag_the_docs_name_is_one_its_command_has():
    commands = _subcommands()
    checked = 0
    for command in _documented():
        for name in _named(command):
            assert name in commands, f"{command}: no npuprof command {name!r}"
            if name == "worker":  # Celery's worker options pass through: the e2e doc test runs it as written
                continue
            options = set(commands[name]._option_string_actions)
            unknown = [flag for flag in command.flags if flag not in options]
            assert not unknown, f"{command}: npuprof {name} has no {', '.join(unknown)}"
            checked += 1
    assert checked > 40  # the docs' synopses and mentions, not a handful


def test_every_documented_service_command_parses():
    """The service's commands as documented (deploy's hosts and fetch --via stand for machines this test
    has not got: tests/e2e runs those paths against a loopback sshd) are accepted by their parser."""
    parser = build_parser()
    service = [c for c in doc_commands(("bash",)) if c.argv[:1] == ["npuprof"] and c.argv[1] in SERVICE]
    assert {c.argv[1] for c in service} == SERVICE
    for command in service:
        args, passthrough = parser.parse_known_args(command.argv[1:])
        assert args.command == command.argv[1] and (not passthrough or args.command == "worker"), (command, passthrough)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> dict:
    """The placeholders' values: two synthetic roots (a slow rank and its twin without it), a local sweep
    of them, one root of that sweep, and an analysis of the first (OUT, for the commands that re-ask it)."""
    base = tmp_path_factory.mktemp("docs")
    search = base / "search"
    for name, scenario in (("baseline", "slow_rank"), ("new", "clean")):
        made = run_cli("synth", str(search / name), "--scenario", scenario, "--ranks", "4", "--steps", "3")
        assert made.returncode == 0, made.stderr
    swept = run_cli("sweep", "--search-root", str(search), "-o", str(base / "archive"), "--jobs", "2")
    assert swept.returncode == 0, swept.stderr
    analyzed = run_cli("analyze", str(search / "baseline"), "-o", str(base / "analysis"))
    assert analyzed.returncode == 0, analyzed.stderr
    return {
        "base": base,
        "BASELINE": str(search / "baseline"),
        "NEW": str(search / "new"),
        "ARCHIVE": str(base / "archive"),
        "ROOT": "baseline",
        "OUT": str(base / "analysis"),
        "runs": {},
    }


def _filled(command: DocCommand, workspace: dict) -> list[str]:
    argv = [workspace.get(token, token) if token in PLACEHOLDERS else token for token in command.argv]
    return [token.replace("../shared/samples", str(SAMPLES), 1) for token in argv]


def run_documented(command: DocCommand, workspace: dict) -> subprocess.CompletedProcess:
    """Run one documented command in its own directory, as written but for its placeholders (once)."""
    key = str(command)
    if key not in workspace["runs"]:
        cwd = workspace["base"] / f"cmd_{len(workspace['runs'])}"
        cwd.mkdir()
        argv = _filled(command, workspace)
        if argv[:3] == ["python", "-m", "pytest"]:  # the suite itself: what it selects, not a second run
            argv = [sys.executable, "-m", "pytest", *argv[3:], "--collect-only", "-q", "-p", "no:cacheprovider"]
            cwd = Path(__file__).resolve().parents[1]
        elif argv[0] == "npuprof":
            argv = [sys.executable, "-m", "npuprof.api.cli", *argv[1:]]
        workspace["runs"][key] = (cwd, subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600))
    return workspace["runs"][key][1]


RUNNABLE = [
    c
    for c in doc_commands()
    if not c.synopsis
    and (c.argv[:1] == ["npuprof"] and c.argv[1] not in SERVICE or c.argv[:3] == ["python", "-m", "pytest"])
]


@pytest.mark.parametrize("command", RUNNABLE, ids=[f"{c.file}:{c.line}" for c in RUNNABLE])
def test_every_documented_command_runs(command: DocCommand, workspace: dict):
    if command.argv == ["python", "-m", "pytest"]:  # the suite itself, running now: it is what CI runs
        ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
        assert re.search(r'^"\$PY" -m pytest$', ci, re.MULTILINE), "the docs' test command is not .ci/run's"
        return
    run = run_documented(command, workspace)
    assert run.returncode == 0, f"{command}\n{run.stderr[-2000:]}"
    if command.argv[0] == "python":  # the selection the line names holds tests
        assert re.search(r"(\d+) tests? collected", run.stdout) and " 0 tests" not in run.stdout, run.stdout[-500:]


def test_the_docs_run_the_commands_a_reader_needs():
    """The README's demo and analyze and the user guide's compare and query are among the runnable lines
    (a doc edit that turns them into prose would silently drop them from the test)."""
    runnable = {(c.file, c.argv[1]) for c in RUNNABLE if c.argv[0] == "npuprof"}
    wanted = {("README.md", "demo"), ("README.md", "analyze"), ("docs/user-guide.md", "compare")}
    assert wanted <= runnable and ("docs/user-guide.md", "query") in runnable


@pytest.mark.parametrize("block", python_blocks(), ids=[f"{f}:{n}" for f, n, _ in python_blocks()])
def test_every_python_block_runs(block: tuple[str, int, str], workspace: dict):
    """A python block runs where the command that writes what it opens ran (``Analysis("out/qwen3")``
    after the README's ``npuprof analyze … -o out/qwen3``)."""
    file, line, code = block
    opened = set(re.findall(r'Analysis\("([^"]+)"\)', code))
    writers = [c for c in RUNNABLE if any(f"-o {path}" in c.text for path in opened)]
    assert writers, f"{file}:{line}: no documented command writes {opened}"
    run_documented(writers[0], workspace)
    cwd = workspace["runs"][str(writers[0])][0]
    env = {**os.environ, "PYTHONWARNINGS": "error::FutureWarning"}
    run = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, f"{file}:{line}\n{run.stderr[-2000:]}"


def test_a_python_block_that_opens_what_nothing_wrote_fails(workspace: dict, tmp_path: Path):
    """The python check can fail: the README's snippet on a directory no command wrote is an error."""
    file, line, code = python_blocks()[0]
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode != 0 and "out/qwen3" in run.stderr, run.stderr[-300:]


def test_the_readme_names_every_finding_type_once():
    """The README's findings table lists exactly the registered finding and annotation types."""
    from npuprof.pipeline.stages.diagnostics import registry

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    table = readme.split("## The findings", 1)[1].split("\n\n")[2]
    listed = re.findall(r"^\| `([a-z_]+)` \|", table, re.MULTILINE)
    registered = {t for d in registry.detectors() for t in d.finding_types}
    assert sorted(listed) == sorted(registered) and len(listed) == len(set(listed))


def test_the_architecture_doc_spells_the_detector_decorators_as_they_are():
    """docs/architecture.md wrote `@detector(..., notes=(...), ...)`, a parameter the registry never had:
    every keyword of each decorator the doc spells is one its function takes, and every one it takes
    without a default is spelled."""
    import inspect

    from conftest import REPO

    from npuprof.pipeline.stages.diagnostics import registry

    text = (REPO / "docs" / "architecture.md").read_text()
    for name in ("detector", "derived_input"):
        spelled = re.findall(rf"`@{name}\(([^`]*)\)`", text)
        assert spelled, name
        taken = inspect.signature(getattr(registry, name)).parameters
        required = {p for p, v in taken.items() if v.default is inspect.Parameter.empty}
        for arguments in spelled:
            keywords = set(re.findall(r"(\w+)=", arguments))
            assert keywords <= set(taken), (name, keywords - set(taken))
            elided = re.search(r"(^|,)\s*\.\.\.\s*(,|$)", arguments)  # "(..., phase=...)": the rest left out
            assert elided or keywords or len(required) == 1, (name, arguments)
            assert elided or not keywords or required <= keywords, (name, required - keywords)


def test_the_architecture_docs_stage_table_names_every_module_of_each_stage():
    """docs/architecture.md's table of what only each stage uses had drifted (8 modules of evidence,
    diagnostics and report missing): every module of a stage package besides its declaration and stage.py,
    and every sub-package, is named in its row, and every stage package has a row."""
    from conftest import REPO

    text = (REPO / "docs" / "architecture.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)/` \| (.*) \|$", text, re.M))
    stages = REPO / "pipeline" / "stages"
    packages = sorted(p.name for p in stages.iterdir() if (p / "__init__.py").is_file())
    assert sorted(rows) == packages
    for stage in packages:
        own = [p.name for p in (stages / stage).glob("*.py") if p.name not in ("__init__.py", "stage.py")]
        own += [f"{p.name}/" for p in (stages / stage).iterdir() if (p / "__init__.py").is_file()]
        assert [name for name in sorted(own) if f"`{name}`" not in rows[stage]] == [], stage
