"""Shared fixtures: the real samples, and running the real ``npuprof`` CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import prerequisites
from helpers.no_skip_under_ci import pytest_runtest_makereport  # noqa: F401  (the hook, registered here)
from helpers.sample_use import reads_samples

from npuprof.pipeline import schema

REPO = Path(__file__).resolve().parents[1]
SAMPLES = prerequisites.samples_dir()

MSINSIGHT = SAMPLES / "msinsight"
PYTORCH_DATA = MSINSIGHT / "test" / "data" / "pytorch"
QWEN_TRAINING = MSINSIGHT / "test" / "st" / "level2"
SERVER_DATA = MSINSIGHT / "server" / "src" / "test" / "test_data"
MSTT = SAMPLES / "mstt" / "profiler" / "msprof_analyze" / "test"

# Every sample root that holds kernel data, with how many ranks it has.
SAMPLE_ROOTS: dict[str, tuple[Path, int]] = {
    "text_level0": (PYTORCH_DATA / "text" / "level0", 2),
    "text_level1": (PYTORCH_DATA / "text" / "level1", 2),
    "text_level2": (PYTORCH_DATA / "text" / "level2", 2),
    "db_level0": (PYTORCH_DATA / "db" / "level0", 2),
    "db_level1": (PYTORCH_DATA / "db" / "level1", 2),
    "db_level2": (PYTORCH_DATA / "db" / "level2", 2),
    "qwen3_training": (QWEN_TRAINING, 4),
    "server_rank0": (SERVER_DATA / "test_rank_0", 1),
    "server_rank1": (SERVER_DATA / "test_rank_1", 1),
    "msprof_db": (SERVER_DATA / "full_db", 1),
    "op_summary": (SERVER_DATA / "test_kernel_parse", 1),
    "mstt_advisor_33col": (MSTT / "ut" / "advisor" / "advisor_backend" / "compute_advice", 1),
    "mstt_advisor_46col": (MSTT / "ut" / "advisor" / "compute_advice" / "data", 1),
}


def pytest_configure(config):
    """Under CI=true, every prerequisite must be here: stop before collection, naming what is missing
    (the controller checks; xdist's workers inherit its verdict)."""
    if hasattr(config, "workerinput") or not prerequisites.in_ci():
        return
    lacking = prerequisites.missing()
    if lacking:
        raise pytest.UsageError(
            "CI=true and prerequisites are missing:\n" + "\n".join(f"  - {p.reason()}" for p in lacking)
        )


def pytest_collection_modifyitems(config, items):
    """Without the real samples, the tests that read them (found from their code) skip with one reason."""
    if prerequisites.BY_NAME["shared/samples"].present():
        return
    skip = pytest.mark.skip(reason=prerequisites.BY_NAME["shared/samples"].reason())
    for item in items:
        if reads_samples(item, SAMPLES):
            item.add_marker(skip)


@dataclass
class CliRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def result(self) -> dict:
        """The one JSON object on stdout (fails the test if there is not exactly one)."""
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        assert len(lines) == 1, f"stdout must hold exactly one JSON object, got: {self.stdout!r}"
        return json.loads(lines[0])


def run_cli(*args: str, env: dict | None = None, timeout: float = 300) -> CliRun:
    """Run the installed ``npuprof`` console script as a user would."""
    exe = shutil.which("npuprof") or str(Path(sys.executable).with_name("npuprof"))
    proc = subprocess.run(
        [exe, *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )
    return CliRun(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli():
    return run_cli


def root_dirs(archive: Path) -> list[Path]:
    """The roots' output dirs of a sweep archive (not its sweep_data/ datasets)."""
    return sorted(p for p in Path(archive).iterdir() if p.is_dir() and p.name != schema.SWEEP_DATA_DIR)


def copy_sample(src: Path, dst: Path) -> Path:
    """Copy a sample tree (the samples are read-only; tests modify copies)."""
    shutil.copytree(src, dst)
    for path in [dst, *dst.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    return dst


def analyze_scenarios(base: Path, names, to_stage: str, seed: int) -> dict[str, tuple[Path, Path]]:
    """Generate each synthetic scenario and analyze it up to ``to_stage``: {name: (root, output dir)}."""
    from npuprof.pipeline.options import AnalyzeOptions
    from npuprof.pipeline.runner import StageRange, analyze
    from npuprof.synth import SCENARIOS, generate

    out = {}
    for name in names:
        root = Path(generate(base / f"{name}_root", name, seed=seed)["root"])
        # a scenario that names its card is analyzed as its user would: --hardware-model
        options = AnalyzeOptions(hardware_model=SCENARIOS[name].card)
        analyze(root, base / f"{name}_out", jobs=2, stage_range=StageRange(to_stage=to_stage), options=options)
        out[name] = (root, base / f"{name}_out")
    return out


class PlantedScenarios(Mapping):
    """Every synth scenario, generated (seed 7) and analyzed through the report on first use and kept for
    the session: ``[name]`` → (root, output dir). Lazy, so a worker pays only for the scenarios its tests
    read (all 39 at once took ~4 minutes of a worker that needed five)."""

    def __init__(self, base: Path) -> None:
        from npuprof.synth import SCENARIOS

        self._base, self._names = base, sorted(SCENARIOS)
        self._done: dict[str, tuple[Path, Path]] = {}

    def __getitem__(self, name: str) -> tuple[Path, Path]:
        if name not in self._names:
            raise KeyError(name)
        if name not in self._done:
            self._done.update(analyze_scenarios(self._base, [name], "report", seed=7))
        return self._done[name]

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


@pytest.fixture(scope="session")
def planted_outputs(tmp_path_factory) -> PlantedScenarios:
    """Every synth scenario analyzed through the report once per session, as tests ask for them:
    {name: (root, output dir)}. summarize's and diagnostics' tests read the same outputs (the stages are
    deterministic)."""
    return PlantedScenarios(tmp_path_factory.mktemp("planted"))


class AnalyzedSamples:
    """The real sample roots, each analyzed through the report with the defaults on first use and kept for
    the session: ``[name]`` → (output dir, the analysis' result object). Tests read these outputs and
    never change them; a test that needs other options or stages analyzes its own copy."""

    def __init__(self, base: Path, roots: dict[str, tuple[Path, int]]) -> None:
        self._base, self._roots = base, roots
        self._done: dict[str, tuple[Path, dict]] = {}

    def __getitem__(self, name: str) -> tuple[Path, dict]:
        if name not in self._done:
            from npuprof.pipeline.runner import analyze

            out = self._base / f"{name}_out"
            self._done[name] = (out, analyze(self._roots[name][0], out, jobs=2))
        return self._done[name]


@pytest.fixture(scope="session")
def sample_outputs(tmp_path_factory) -> AnalyzedSamples:
    """Every real sample root analyzed once per session (lazily, as tests ask for them); the roots are
    named here, so a test that asks for this fixture skips without the samples (helpers/sample_use.py)."""
    return AnalyzedSamples(tmp_path_factory.mktemp("samples"), SAMPLE_ROOTS)


@pytest.fixture
def small_filesystem(tmp_path):
    """A 2.5 MB tmpfs at ``tmp_path / "archive"``: room for about two small roots' outputs, not four
    (the full-disk tests, local and through the service; root can mount here)."""
    mount = tmp_path / "archive"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2500k", "tmpfs", str(mount)], capture_output=True)
    assert done.returncode == 0, f"cannot mount a test filesystem: {done.stderr.decode()}"
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)  # lazily: a worker may still hold a file there


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium per test module (skips with the missing piece's name outside CI)."""
    from helpers.browser import BROWSER_PREREQUISITES, start_browser

    lacking = prerequisites.missing(BROWSER_PREREQUISITES)
    if lacking:
        pytest.skip("; ".join(p.reason() for p in lacking))
    driver = start_browser()
    yield driver
    driver.quit()
