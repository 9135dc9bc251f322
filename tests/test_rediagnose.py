"""A finished analysis asked again (``npuprof diagnose``, ``Analysis.diagnose``): the detectors re-run over
the tables on disk with rules set for the run. On a root with a planted slow rank: the same rules give
the same findings; a threshold past the planted fault's statistic silences it and one below keeps it;
in place only diagnostics and the report change; ``-o`` leaves the analysis as it was; a rule the file
does not hold is a usage error naming the ones it does."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
from badinputs.hostile import ALIAS_BOMB
from conftest import run_cli

from npuprof import knowledge
from npuprof.api import Analysis
from npuprof.pipeline import schema
from npuprof.pipeline.runner import analyze
from npuprof.synth import generate

# one worker runs the module: its module fixture is built once (xdist would build it again on each
# worker a test of it lands on, and again whenever modules interleave there)
pytestmark = pytest.mark.xdist_group("rediagnose")

SLOW = "slow_rank_suspected"


@pytest.fixture(scope="module")
def slow_rank(tmp_path_factory) -> tuple[Path, Path, dict]:
    """A 4-rank root whose rank 2 computes 1.6x slower, analyzed; and its ground truth."""
    base = tmp_path_factory.mktemp("rediagnose")
    generate(base / "root", "slow_rank", seed=0, steps=4)
    analyze(base / "root", base / "out", jobs=2)
    return base / "root", base / "out", json.loads((base / "root" / "ground_truth.json").read_text())


def _findings(path: Path) -> list[dict]:
    return json.loads((path / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]


def _digests(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): hashlib.sha1(p.read_bytes()).hexdigest() for p in out.rglob("*") if p.is_file()}


def test_the_same_rules_give_the_same_findings_and_a_planted_fault_answers_to_its_threshold(slow_rank):
    root, out, truth = slow_rank
    (planted,) = [e for e in truth["expected_findings"] if e["type"] == SLOW]
    original = _findings(out)
    (found,) = [f for f in original if f["finding_type"] == SLOW]
    assert found["rank_ids"] == planted["ranks"] == [2]
    again = run_cli("diagnose", str(out), "--dry-run")
    assert again.returncode == 0, again.stderr
    assert again.result["finding_count"] == len(original) and again.result["rules_overridden"] == {}
    assert [f["summary"] for f in again.result["findings"]] == [f["summary"] for f in original]
    # the planted rank is voted in every step: asking for more than all of them silences it, a bar just
    # under what it reached keeps it (the statistic and the threshold the finding names)
    share = found["statistic"]["value"]
    for bar, fires in ((1.01, False), (round(share - 0.01, 3), True)):
        run = run_cli("diagnose", str(out), "--set", f"{SLOW}.step_share_min={bar}", "--detector", SLOW, "--dry-run")
        assert run.returncode == 0, run.stderr
        assert run.result["rules_overridden"] == {f"findings.{SLOW}.step_share_min": bar}
        assert bool(run.result["findings"]) is fires, (bar, share, run.result["findings"])
        assert all(f["finding_type"] == SLOW for f in run.result["findings"])  # --detector shows its own
    assert run.result["seconds"] < 30  # seconds, not a re-analysis (the bench measures; this catches a rerun)


def test_in_place_only_diagnostics_and_the_report_change(slow_rank, tmp_path):
    _, out, _ = slow_rank
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    before = _digests(copy)
    run = run_cli("diagnose", str(copy), "--set", f"{SLOW}.step_share_min=1.01")
    assert run.returncode == 0, run.stderr
    changed = {path for path, digest in _digests(copy).items() if before.get(path) != digest}
    allowed = ("diagnos", "step_ledger", "critical_path", "step_anomalies", "slow_rank_diff", "report", "manifest")
    assert changed and all(path.startswith(allowed) for path in changed), sorted(changed)
    document = json.loads((copy / schema.DIAGNOSIS_FINDINGS).read_text())
    assert document["rules_overridden"] == {f"findings.{SLOW}.step_share_min": 1.01}
    assert SLOW not in {f["finding_type"] for f in document["diagnosis_findings"]}
    report = (copy / schema.REPORT_MD).read_text()
    assert "Asked again (npuprof diagnose)" in report and f"`findings.{SLOW}.step_share_min`" in report
    assert not list(copy.glob("*.lock")) and not (copy / ".npuprof.lock").exists()


def test_elsewhere_leaves_the_analysis_as_it_was(slow_rank, tmp_path):
    _, out, _ = slow_rank
    before = _digests(out)
    target = tmp_path / "asked"
    run = run_cli("diagnose", str(out), "--set", f"{SLOW}.step_share_min=1.01", "-o", str(target))
    assert run.returncode == 0, run.stderr
    assert _digests(out) == before
    assert SLOW not in {f["finding_type"] for f in _findings(target)}
    assert (target / schema.STEP_LEDGER_CSV.file).is_file() and (target / "diagnostics_manifest.json").is_file()
    again = run_cli("diagnose", str(out), "-o", str(target))  # not into a dir that holds another answer
    assert again.returncode == 2 and "not empty" in again.stderr


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        (f"{SLOW}.step_share=0.5", "it holds"),  # a typo: the keys it does hold are listed
        (f"{SLOW}.step_share_min=high", "is float"),  # a number's place takes a number
        ("no_such_key=1", "has no 'no_such_key'"),
        ("step_share_min", "KEY=VALUE"),
    ],
)
def test_a_rule_the_file_does_not_hold_is_a_usage_error(slow_rank, setting, says):
    _, out, _ = slow_rank
    run = run_cli("diagnose", str(out), "--set", setting, "--dry-run")
    assert run.returncode == 2 and says in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


# issue 71: each of these ran before Dec 7 — a 744 MB string, an object's docstring in the report, a
# 2 GB alias expansion, a KeyError traceback, a threshold no comparison passes, a made-up severity
HOSTILE_SETTINGS = [
    (f"{SLOW}.text=x {{wait_ms:>600000000}}", "not a format this text takes"),
    (f"{SLOW}.text=x {{wait_ms.__class__.__doc__}}", "not a placeholder by name"),
    (f"{SLOW}.text=x {{wait_ms!r}}", "not a placeholder by name"),
    (f"{SLOW}.text=x {{no_such_value}}", "may use the placeholders its text uses"),
    (f"{SLOW}.text=x {{", "not a text template"),
    (f"{SLOW}.dixon_q_critical={{}}", "may not drop what the rule holds"),
    (f"{SLOW}.robust_z_min=.nan", "must be a finite number"),
    (f"{SLOW}.robust_z_min=.inf", "must be a finite number"),
    (f"{SLOW}.severity=catastrophic", "must be one of high, medium, low"),
    (f"{SLOW}.dixon_q_critical=" + ALIAS_BOMB, "YAML aliases are not taken"),
]


@pytest.mark.parametrize(("setting", "says"), HOSTILE_SETTINGS)
def test_a_setting_that_would_blow_up_or_leak_is_refused(setting, says):
    """The checks --set goes through (knowledge.load_setting, then overridden), in process."""
    key, _, text = setting.partition("=")
    with pytest.raises(knowledge.OverrideError, match=re.escape(says)):
        with knowledge.overridden("diagnosis_rules", {f"findings.{key}": knowledge.load_setting(text)}):
            pass


@pytest.mark.parametrize(("setting", "says"), [HOSTILE_SETTINGS[0], HOSTILE_SETTINGS[-1]])
def test_a_refused_setting_is_a_one_line_usage_error(slow_rank, setting, says):
    _, out, _ = slow_rank
    run = run_cli("diagnose", str(out), "--set", setting, "--dry-run")
    assert run.returncode == 2 and says in run.stderr, run.stderr[-2000:]
    assert len(run.stderr.strip().splitlines()) == 1


def test_a_reworded_text_with_its_own_placeholders_and_formats_is_taken(slow_rank):
    _, out, _ = slow_rank
    setting = f"{SLOW}.text=rank {{rank}} is late, the others wait {{wait_ms:>8.1f}} ms"
    run = run_cli("diagnose", str(out), "--set", setting, "--dry-run", "--json")
    assert run.returncode == 0, run.stderr
    assert "rank 2 is late, the others wait" in run.stdout


def test_an_unknown_detector_and_a_dir_that_is_no_analysis_are_usage_errors(slow_rank, tmp_path):
    _, out, _ = slow_rank
    run = run_cli("diagnose", str(out), "--detector", "slow_ranks", "--dry-run")
    assert run.returncode == 2 and "slow_rank" in run.stderr.split("detectors:")[1]
    run = run_cli("diagnose", str(tmp_path), "--dry-run")
    assert run.returncode == 2 and "not an npuprof output dir" in run.stderr


def test_the_python_api_asks_in_memory(slow_rank):
    _, out, truth = slow_rank
    before = _digests(out)
    analysis = Analysis(out)
    assert analysis.diagnose(SLOW)["rank_ids"].tolist() == [[2]]
    assert analysis.diagnose(SLOW, step_share_min=1.01).empty
    assert len(analysis.diagnose(rules={"evidence_sample": 1})["evidence_ids"].iloc[0]) == 1
    with pytest.raises(Exception, match="it holds"):
        analysis.diagnose(SLOW, step_share=0.5)
    assert _digests(out) == before  # in memory: nothing written
