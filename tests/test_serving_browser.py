"""report.html of a serving capture in a real headless Chromium: the forwards by phase are shown, each phase's
figures equal to analysis_summary.json's serving view, and a report of a training capture shows none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import prerequisites
from helpers.browser import BROWSER_PREREQUISITES, console_errors, open_report

from npuprof.pipeline.options import AnalyzeOptions
from npuprof.pipeline.runner import analyze
from npuprof.synth import generate

prerequisites.require(*BROWSER_PREREQUISITES)
from selenium.webdriver.common.by import By  # noqa: E402

pytestmark = pytest.mark.xdist_group("browser")  # one worker: shares the browser


def _report(base: Path, name: str, serving: bool) -> Path:
    root = base / f"{name}_root"
    generate(root, name, seed=2, serving=serving, ranks=2 if name == "clean" else None)
    out = base / f"{name}_out"
    analyze(root, out, jobs=1, options=AnalyzeOptions(mode="full"))
    return out


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("serving_html")
    return {"serving": _report(base, "serving", True), "clean": _report(base, "clean", False)}


def test_the_forwards_by_phase_are_shown_as_the_summary_has_them(browser, reports):
    out = reports["serving"]
    view = json.loads((out / "report" / "analysis_summary.json").read_text())["serving"]
    console_errors(browser)
    open_report(browser, (out / "report" / "report.html").as_uri())
    assert browser.find_element(By.ID, "serving-section").is_displayed()
    rows = browser.find_elements(By.CSS_SELECTOR, "#serving tr[data-phase]")
    assert [row.get_attribute("data-phase") for row in rows] == list(view["phases"])
    for row in rows:
        phase = view["phases"][row.get_attribute("data-phase")]
        cells = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
        assert cells[1] == str(phase["forwards"]) and cells[4] == str(phase["tokens"])
        assert cells[5] == ("–" if phase["padded_tokens"] is None else str(phase["padded_tokens"]))
        assert cells[6] == f"{phase['wall_p50_ms']:.3f} ms"
        assert cells[2] == ", ".join(f"{mode} {n}" for mode, n in phase["graph_modes"].items())
    assert console_errors(browser) == []


def test_a_training_report_shows_no_forwards(browser, reports):
    out = reports["clean"]
    assert "serving" not in json.loads((out / "report" / "analysis_summary.json").read_text())
    open_report(browser, (out / "report" / "report.html").as_uri())
    assert not browser.find_element(By.ID, "serving-section").is_displayed()
    assert browser.find_elements(By.CSS_SELECTOR, "#serving tr") == []
    assert console_errors(browser) == []
