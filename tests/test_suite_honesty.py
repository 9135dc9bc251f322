"""The suite keeps itself honest: under CI=true a missing prerequisite stops the run with its name
(each one hidden in turn), without the samples only the tests that read them skip, no test module
imports another, and no assertion is written so that it cannot fail."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import prerequisites

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
BINARIES = tuple(p.name for p in prerequisites.PREREQUISITES if p.kind == "binary")


def _pytest(args: list[str], env: dict[str, str], cwd: Path = REPO) -> subprocess.CompletedProcess:
    """The README's test command on one process (xdist off, the rest of the settings kept)."""
    command = [sys.executable, "-m", "pytest", "-o", "addopts=--import-mode=importlib", "-q", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def _hidden(name: str, base: Path) -> dict[str, str]:
    """This process's environment with prerequisite ``name`` made unreachable, as if not installed."""
    env = {**os.environ, "CI": "true"}
    kind = prerequisites.BY_NAME[name].kind
    if kind == "package":  # a package of that name that cannot be imported, first on the path
        (base / "shadow" / name).mkdir(parents=True)
        (base / "shadow" / name / "__init__.py").write_text(f"raise ImportError('{name} hidden by the test')\n")
        env["PYTHONPATH"] = os.pathsep.join([str(base / "shadow"), env.get("PYTHONPATH", "")])
    elif kind == "binary":  # PATH narrowed to the other binaries the suite needs
        (base / "bin").mkdir()
        for other in BINARIES:
            found = prerequisites.binary(other)
            if other != name and found:
                (base / "bin" / other).symlink_to(found)
        env["PATH"] = str(base / "bin")
    elif kind == "samples":
        env["NPUPROF_SAMPLES"] = str(base / "no-samples-here")
    else:
        env["NPUPROF_PEER_VENV"] = str(base / "no-peer-venv-here")
    return env


@pytest.mark.parametrize("name", [p.name for p in prerequisites.PREREQUISITES])
def test_under_ci_a_missing_prerequisite_stops_the_run_with_its_name(name, tmp_path):
    run = _pytest(["--collect-only", "tests/test_knowledge.py"], _hidden(name, tmp_path))
    output = run.stdout + run.stderr
    assert run.returncode != 0, f"the run went on without {name}: {output[-2000:]}"
    assert f"'{name}' is missing" in output and "CI=true" in output, output[-2000:]
    assert "collected" not in output  # stopped before collection, not by one module's import


def _hollow(case: str, base: Path) -> dict[str, str]:
    """This process's environment under CI with a prerequisite present but hollow: the samples dir empty
    or one sample truncated, the vendor tool a zero-byte file or one that says another version."""
    env = {**os.environ, "CI": "true"}
    if case in ("empty samples", "truncated sample"):
        samples = base / "samples"
        samples.mkdir()
        if case == "truncated sample":
            shutil.copytree(prerequisites.samples_dir(), samples, dirs_exist_ok=True)
            victim = next(p for p in sorted(samples.rglob("kernel_details.csv")))
            victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
        env["NPUPROF_SAMPLES"] = str(samples)
        return env
    tool = base / "venv" / "bin" / "msprof-analyze"
    tool.parent.mkdir(parents=True)
    tool.write_text("" if case == "zero-byte vendor tool" else "#!/bin/sh\necho 'msprof-analyze 8.0.0' >&2\n")
    tool.chmod(0o755)
    env["NPUPROF_PEER_VENV"] = str(base / "venv")
    return env


@pytest.mark.parametrize("case", ["empty samples", "truncated sample", "zero-byte vendor tool", "another version"])
def test_under_ci_a_hollow_prerequisite_stops_the_run_naming_what_is_wrong(case, tmp_path):
    """A prerequisite that exists but is not the real thing stops the run like a missing one: the samples
    are checked against tests/data/samples_manifest.json (every file, its size and sha256), the vendor by
    what ``msprof-analyze --version`` says."""
    run = _pytest(["--collect-only", "tests/test_knowledge.py"], _hollow(case, tmp_path))
    output = run.stdout + run.stderr
    assert run.returncode != 0 and "CI=true" in output and "collected" not in output, output[-2000:]
    said = {
        "empty samples": f"is missing ({len(json.loads(prerequisites.SAMPLES_MANIFEST.read_text()))} files expected)",
        "truncated sample": "kernel_details.csv holds",
        "zero-byte vendor tool": "no working msprof-analyze",
        "another version": "msprof-analyze --version says 8.0.0",
    }[case]
    assert said in " ".join(output.split()), output[-2000:]


def test_under_ci_a_test_that_skips_fails(tmp_path):
    """Under CI=true a skip — an empty parameter set, a guard — is a failure naming its reason; elsewhere
    it stays a skip."""
    module = tmp_path / "test_skips.py"
    module.write_text(
        "import pytest\n\n"
        "def test_guarded():\n    pytest.skip('the guard held')\n\n"
        "@pytest.mark.parametrize('case', [])\ndef test_over_nothing(case):\n    pass\n\n"
        "def test_that_runs():\n    assert True\n"
    )
    args = ["-p", "helpers.no_skip_under_ci", "-p", "no:cacheprovider", "-rA", str(module)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    under_ci = _pytest(args, {**env, "CI": "true"}, cwd=tmp_path)
    # the guard fails in the call, the empty parameter set in the setup (pytest counts that an error)
    assert under_ci.returncode == 1 and "1 failed, 1 passed, 1 error" in under_ci.stdout, under_ci.stdout[-2000:]
    assert "where nothing may skip: Skipped: the guard held" in under_ci.stdout
    assert "where nothing may skip: Skipped: got empty parameter set" in under_ci.stdout
    elsewhere = _pytest(args, {k: v for k, v in env.items() if k != "CI"}, cwd=tmp_path)
    assert elsewhere.returncode == 0 and "1 passed, 2 skipped" in elsewhere.stdout, elsewhere.stdout[-2000:]


def test_tests_of_one_xdist_group_run_on_one_worker(tmp_path):
    """The suite's expensive fixtures (planted_outputs, the samples' analyses, the planted sweep) are built
    once per worker, and the tests that share one carry its xdist_group: the README's settings (three
    workers, --dist loadgroup) must send a group to one worker, or every worker builds them all (pytest
    9.2 silently stops the grouping: pyproject pins below it)."""
    module = tmp_path / "test_grouped.py"
    module.write_text(
        "import os\nfrom pathlib import Path\nimport pytest\n\npytestmark = pytest.mark.xdist_group('shared')\n\n"
        + "".join(
            f"def test_{i}():\n    Path(__file__).with_name('{i}.worker')"
            ".write_text(os.environ['PYTEST_XDIST_WORKER'])\n\n"
            for i in range(6)
        )
    )
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "3", "--dist", "loadgroup", "-q"]
    run = subprocess.run([*command, str(module)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    workers = {path.read_text() for path in tmp_path.glob("*.worker")}
    assert run.returncode == 0 and len(list(tmp_path.glob("*.worker"))) == 6, run.stdout[-2000:]
    assert len(workers) == 1, f"one group ran on workers {sorted(workers)}"


def test_under_ci_with_everything_present_the_run_starts():
    """The control for the hidden runs above: the same command with nothing hidden collects."""
    lacking = prerequisites.missing()
    if lacking and not prerequisites.in_ci():
        pytest.skip("; ".join(p.reason() for p in lacking))
    run = _pytest(["--collect-only", "tests/test_knowledge.py"], {**os.environ, "CI": "true"})
    assert run.returncode == 0 and "collected" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]


def test_without_the_samples_only_the_tests_that_read_them_skip(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"NPUPROF_SAMPLES": str(tmp_path / "none")}
    files = ["tests/test_diagnostics.py", "tests/test_normalize.py", "tests/test_summarize.py"]
    run = _pytest(["-p", "helpers.skip_report", "--collect-only", *files], env)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    verdicts = _verdicts(run.stdout)
    assert verdicts, run.stdout[-2000:]
    # synth-only tests run
    planted = [t for t in verdicts if "test_every_planted_fault_is_found_on_its_ranks" in t]
    assert planted and all(verdicts[t] == "run" for t in planted)
    assert verdicts["tests/test_diagnostics.py::test_a_planted_clock_offset_is_recovered_within_ten_percent"] == "run"
    # tests on real captures skip: parametrized over sample roots, or reading one through a module constant
    on_samples = [t for t in verdicts if "qwen3_training" in t or "text_level2" in t]
    assert on_samples and all(verdicts[t] == "skip" for t in on_samples), on_samples
    if prerequisites.samples_dir().is_dir():  # with the samples, nothing is marked
        present = _pytest(["-p", "helpers.skip_report", "--collect-only", *files], dict(os.environ))
        assert set(_verdicts(present.stdout).values()) == {"run"}, present.stdout[-2000:]


def _verdicts(stdout: str) -> dict[str, str]:
    """test id -> "skip" or "run", from the skip_report plugin's lines."""
    lines = [line.split(" ", 2) for line in stdout.splitlines() if line.startswith("SKIP-REPORT ")]
    return {nodeid: verdict for _, verdict, nodeid in lines}


def _test_modules() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if p.name.startswith("test_") or p.parent.name == "helpers")


def test_no_test_module_imports_another():
    """Shared helpers live in tests/helpers/ or a conftest: a test module that skips or fails to import
    takes no other module's tests with it."""
    offenders = []
    for path in _test_modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            offenders += [f"{path.relative_to(REPO)}: {n}" for n in names if n.split(".")[-1].startswith("test_")]
    assert not offenders, offenders


def _cannot_fail(test: ast.expr) -> bool:
    """An assertion that holds whatever the code does: ``x or True``, a non-empty constant."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return any(isinstance(v, ast.Constant) and v.value for v in test.values)
    return isinstance(test, ast.Constant) and bool(test.value)


def test_no_assertion_is_written_so_that_it_cannot_fail():
    offenders = [
        f"{path.relative_to(REPO)}:{node.lineno}"
        for path in _test_modules()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Assert) and _cannot_fail(node.test)
    ]
    assert not offenders, offenders


def test_pytest_importorskip_is_not_used():
    """importorskip skips silently whatever CI says: prerequisites are declared in helpers/prerequisites.py."""
    offenders = [
        f"{path.relative_to(REPO)}:{node.lineno}"
        for path in _test_modules()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "importorskip"
    ]
    assert not offenders, offenders
