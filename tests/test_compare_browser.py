"""compare.html in a real headless Chromium: the two timelines of the step class, aligned, the faster
kernels coloured as gains, and a hostile kernel name shown as text, never run."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import prerequisites
from helpers.browser import BROWSER_PREREQUISITES

from npuprof.pipeline import schema
from npuprof.pipeline.compare.run import compare
from npuprof.pipeline.runner import StageRange, analyze
from npuprof.synth import generate
from npuprof.synth.scenarios import scenario

prerequisites.require(*BROWSER_PREREQUISITES)
from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

pytestmark = pytest.mark.xdist_group("browser")

HOSTILE = "<img src=x onerror=\"document.title='pwned'\">"


def _analyzed(base: Path, name: str, planted) -> Path:
    root = Path(generate(base / f"{name}_root", planted, seed=4)["root"])
    analyze(root, base / f"{name}_out", jobs=2, stage_range=StageRange(to_stage="model"))
    return base / f"{name}_out"


def _rename_one_kernel(out: Path, rank: int, new_name: str) -> None:
    """An adversarial capture: one kernel of the new side carries markup in its name (all its calls)."""
    part = out / schema.NORMALIZED_EVENTS.partition(rank)
    table = pq.read_table(part)
    names = table["name"].to_pylist()
    target = next(n for n in names if n and "RmsNorm" in n)
    names = [new_name if n == target else n for n in names]  # every call of that kernel
    renamed = pa.array(names, type=table.schema.field("name").type)
    table = table.set_column(table.schema.get_field_index("name"), "name", renamed)
    pq.write_table(table, part)


def test_compare_html_draws_both_timelines_with_the_faster_attention_in_green(browser, tmp_path):
    planted = scenario("clean_inference", steps=3)
    base = _analyzed(tmp_path, "base", planted)
    new = _analyzed(tmp_path, "new", replace(planted, kernel_factors=(("FlashAttentionScore", 0.8),)))
    for rank in range(4):
        _rename_one_kernel(new, rank, HOSTILE)
    out = tmp_path / "cmp"
    compare(base, new, out)
    page = out / schema.COMPARE_HTML
    assert "<img" not in page.read_text().split('id="data">')[1].split("</script>")[0]  # escaped in the JSON
    browser.get(page.as_uri())
    lanes = browser.find_elements(By.CSS_SELECTOR, "g.timeline")
    assert [lane.get_attribute("data-side") for lane in lanes] == ["baseline", "new"]
    base_rects = lanes[0].find_elements(By.CSS_SELECTOR, "rect.kernel")
    new_rects = lanes[1].find_elements(By.CSS_SELECTOR, "rect.kernel")
    assert len(base_rects) == len(new_rects) > 10  # the same step class: the same kernels
    gains = lanes[1].find_elements(By.CSS_SELECTOR, "rect.gain")
    assert gains and all("FlashAttentionScore" in g.get_attribute("textContent") for g in gains)
    assert not browser.find_elements(By.CSS_SELECTOR, "rect.regression")

    def end(rect) -> float:
        return float(rect.get_attribute("x")) + float(rect.get_attribute("width"))

    assert end(new_rects[-1]) < end(base_rects[-1])  # aligned at the step start, the new step ends earlier
    hostile = [r for r in new_rects if HOSTILE in r.get_attribute("textContent")]
    assert hostile and browser.title == "npuprof compare"  # shown as text, never run
    assert not browser.find_elements(By.CSS_SELECTOR, "svg img, body > img")
    try:
        browser.switch_to.alert
        raise AssertionError("an alert opened")
    except NoAlertPresentException:
        pass
    shutil.copy(page, tmp_path / "compare_copy.html")
