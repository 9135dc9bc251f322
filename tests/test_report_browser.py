"""report.html in a real headless Chromium (Debian's chromium + chromium-driver, driven by selenium):
the timeline draws every rank, zooms, jumps to findings, the step inspector lists the step's layers,
the single-file variant works from file://, and hostile kernel names never execute."""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import threading
from pathlib import Path

import pandas as pd
import pytest
from conftest import PYTORCH_DATA
from helpers import prerequisites
from helpers.browser import BROWSER_PREREQUISITES, click_canvas, console_errors, open_report
from helpers.hostile_names import HOSTILE, plant_hostile_names

from npuprof.pipeline import schema
from npuprof.pipeline.options import AnalyzeOptions
from npuprof.pipeline.runner import StageRange, analyze
from npuprof.pipeline.stages.report.ledger_view import line_words
from npuprof.synth import generate

ARTIFACTS = Path(os.environ.get("NPUPROF_TEST_ARTIFACTS", "test-artifacts"))

prerequisites.require(*BROWSER_PREREQUISITES)
from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

pytestmark = pytest.mark.xdist_group("browser")  # one worker: shares its fixtures


@pytest.fixture(scope="module")
def mixed_report(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("html")
    root = Path(generate(base / "root", "mixed", seed=7)["root"])
    analyze(root, base / "out", jobs=2, options=AnalyzeOptions(mode="full"))
    single = base / "single"
    shutil.copytree(base / "out", single)
    analyze(
        None,
        single,
        jobs=1,
        stage_range=StageRange(only_stage="report"),
        options=AnalyzeOptions(mode="full", html_single_file=True),
    )
    return base


@pytest.fixture(scope="module")
def cnn_report(tmp_path_factory) -> Path:
    """The real CNN capture analyzed with the interactive report (its output dir)."""
    out = tmp_path_factory.mktemp("cnn") / "out"
    analyze(PYTORCH_DATA / "text" / "level2", out, jobs=1, options=AnalyzeOptions(mode="full"))
    return out


@pytest.fixture(scope="module")
def served(mixed_report):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(mixed_report / "out" / "report"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/report.html"
    server.shutdown()


def view_of(driver) -> tuple[float, float]:
    canvas = driver.find_element(By.ID, "timeline")
    return float(canvas.get_attribute("data-view-start")), float(canvas.get_attribute("data-view-end"))


def stream_labels(browser) -> list[str]:
    """What each (rank, stream) row should be labelled, from the page's lanes: its stream id, or what the
    row holds when the capture gives it none (communication ops: 'collectives')."""
    coarse = browser.execute_script("return npuprof.state.data.coarse")
    return sorted(
        f"stream {stream}" if stream >= 0 else "collectives" if kind == "communication" else "no stream id"
        for (_, stream), kind in zip(coarse["lanes"], coarse["kinds"])
    )


def test_the_timeline_draws_every_rank_and_zooms(browser, served, mixed_report):
    open_report(browser, served)
    canvas = browser.find_element(By.ID, "timeline")
    assert canvas.get_attribute("data-rank-rows") == "4"
    assert [e.text for e in browser.find_elements(By.CLASS_NAME, "rank-label")] == [
        "rank 0",
        "rank 1",
        "rank 2",
        "rank 3",
    ]
    # every device stream row is labelled with its stream, under its rank
    streams = [e.text for e in browser.find_elements(By.CLASS_NAME, "stream-label")]
    assert sorted(streams) == stream_labels(browser) and any(s.startswith("stream ") for s in streams)
    start, end = view_of(browser)
    browser.find_element(By.ID, "zoom-in").click()
    zoomed = view_of(browser)
    assert zoomed[1] - zoomed[0] == pytest.approx((end - start) / 2, rel=1e-6)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.find_element(By.ID, "zoom-reset").click()
    browser.save_screenshot(str(ARTIFACTS / "report-mixed.png"))


def test_clicking_a_finding_moves_the_view_to_its_evidence(browser, served, mixed_report):
    open_report(browser, served)
    findings = json.loads((mixed_report / "out" / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]
    index = pd.read_csv(mixed_report / "out" / schema.EVIDENCE_INDEX_CSV.file).set_index("evidence_id")
    buttons = browser.find_elements(By.CSS_SELECTOR, "#findings button")
    assert len(buttons) == len(findings) >= 2
    before = view_of(browser)
    buttons[0].click()
    after = view_of(browser)
    window = browser.execute_script("return npuprof.state.data.findings[0].window")
    assert window[3] in findings[0]["evidence_ids"] and window[3] in index.index
    assert after[0] <= window[1] and after[1] >= window[2] and (after[1] - after[0]) < (before[1] - before[0])
    # each card says what to try, from the note written for its type: the planted slow rank's names the
    # card's clock and the host's cores (knowledge/detectors/slow_rank/slow_rank.md)
    remedies = [p.text for p in browser.find_elements(By.CSS_SELECTOR, "#findings p.remedy")]
    slow = [f for f in findings if f["finding_type"] == "slow_rank_suspected"]
    assert slow and len(remedies) >= len(slow), remedies
    assert any("npu-smi info" in text and "CPU_AFFINITY_CONF" in text for text in remedies), remedies
    # and why it is believed: its confidence, its statistic against its threshold, what it cites
    facts = [p.text for p in browser.find_elements(By.CSS_SELECTOR, "#findings p.facts")]
    assert len(facts) == len(findings), facts
    for finding, text in zip(findings, facts):
        statistic = finding["statistic"]
        assert text.startswith(f"{finding['confidence']} confidence · {statistic['name']} = "), text
        assert f"(threshold {float(statistic['threshold']):g})" in text and finding["evidence_ids"][0] in text, text


def test_the_step_inspector_lists_the_layers_of_the_step(browser, served, mixed_report):
    open_report(browser, served)
    Select(browser.find_element(By.ID, "pick-rank")).select_by_value("2")
    Select(browser.find_element(By.ID, "pick-step")).select_by_index(1)
    ordinal = int(Select(browser.find_element(By.ID, "pick-step")).first_selected_option.get_attribute("value"))
    layers = pd.read_parquet(mixed_report / "out" / schema.LAYER_SEGMENTS, columns=["rank_id", "step_ordinal"])
    expected = int(((layers["rank_id"].astype(int) == 2) & (layers["step_ordinal"] == ordinal)).sum())
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, "table.top-ops tr"))
    assert len(browser.find_elements(By.CSS_SELECTOR, "table.layers tr")) - 1 == expected > 0


def test_zooming_in_shows_kernels_and_their_operator_card(browser, served, mixed_report):
    open_report(browser, served)
    span = browser.execute_script("return npuprof.state.data.span_us")
    browser.execute_script("npuprof.setView(arguments[0], arguments[1])", span * 0.30, span * 0.305)
    WebDriverWait(browser, 20).until(
        lambda d: int(d.find_element(By.ID, "timeline").get_attribute("data-kernels-drawn")) > 0
    )
    # a compute kernel (a collective has no shapes to show): the first drawn whose op type is not
    # communication (a gradient bucket's all-reduce runs beside the backward's kernels)
    compute = "npuprof.state.hits.find(h => String(h[4].kinds[h[3][5]]) !== 'communication')"
    hit = browser.execute_script(f"const h = {compute}; return [h[0] + h[2] / 2, h[1] + 5];")
    canvas = browser.find_element(By.ID, "timeline")
    click_canvas(browser, canvas, hit[0], hit[1])
    card = browser.find_element(By.ID, "card-body").text
    assert "source row" in card and "duration" in card
    # the card comes into view (it sits below the timeline: below the fold of a 1000 px window)
    top = browser.execute_script("return document.getElementById('card-body').getBoundingClientRect().top;")
    assert 0 <= top < browser.execute_script("return window.innerHeight")
    # every normalized field of that kernel, with its unit, as normalize wrote it
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, "dl.kernel-fields dd"))
    names = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "dl.kernel-fields dt")]
    values = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "dl.kernel-fields dd")]
    shown = dict(zip(names, values))
    rank, row = browser.execute_script(f"const k = {compute}[3]; return [k[0], k[6]];")
    events = pd.read_parquet(mixed_report / "out" / schema.NORMALIZED_EVENTS)
    (kernel,) = events[(events["rank_id"].astype(int) == rank) & (events["row_idx"] == row)].itertuples()
    assert shown["name"] == kernel.name and shown["accelerator_core"] == kernel.accelerator_core
    assert shown["input_shapes"] == kernel.input_shapes and shown["block_dim"] == str(kernel.block_dim)
    value, unit = shown["duration_us"].split()
    assert unit == "µs" and float(value) == round(kernel.duration_ns / 1000, 3)
    assert len(shown) >= 20  # the capture's fields, not a handful


def test_the_report_opened_by_a_double_click_shows_every_level(browser, mixed_report):
    """report.html from file:// with its assets beside it (no server, no --html-single-file): the page
    loads its data as scripts, so the timeline, the findings, a finding jump and the kernels all work."""
    console_errors(browser)  # drop what earlier pages logged
    open_report(browser, (mixed_report / "out" / "report" / "report.html").as_uri())
    assert browser.find_element(By.ID, "timeline").get_attribute("data-rank-rows") == "4"
    assert browser.find_element(By.ID, "status").text in ("ok", "degraded")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "report-mixed-file-url.png"))  # the README's picture
    buttons = browser.find_elements(By.CSS_SELECTOR, "#findings button")
    assert len(buttons) >= 2
    before = view_of(browser)
    buttons[0].click()
    assert view_of(browser)[1] - view_of(browser)[0] < before[1] - before[0]
    span = browser.execute_script("return npuprof.state.data.span_us")
    browser.execute_script("npuprof.setView(arguments[0], arguments[1])", span * 0.30, span * 0.305)
    WebDriverWait(browser, 20).until(
        lambda d: int(d.find_element(By.ID, "timeline").get_attribute("data-kernels-drawn")) > 0
    )
    assert console_errors(browser) == []


def test_the_single_file_report_works_from_a_file_url(browser, mixed_report):
    page = mixed_report / "single" / "report" / "report.html"
    # the copy's assets from the multi-file run went with the rerun that does not write them: the page
    # below works from its own bytes alone
    assert not (mixed_report / "single" / "report" / "assets").exists()
    open_report(browser, page.as_uri())
    assert browser.find_element(By.ID, "timeline").get_attribute("data-rank-rows") == "4"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#findings button")) >= 2


def test_hostile_kernel_names_never_execute_in_the_page(browser, tmp_path):
    root = Path(generate(tmp_path / "root", "clean", seed=3, ranks=2)["root"])
    plant_hostile_names(root)
    analyze(root, tmp_path / "out", jobs=2, options=AnalyzeOptions(mode="full", html_single_file=True))
    open_report(browser, (tmp_path / "out" / "report" / "report.html").as_uri())
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text
    assert len(browser.find_elements(By.TAG_NAME, "script")) == 1  # only the report's own
    assert HOSTILE["script"] in browser.execute_script("return Object.keys(npuprof.state.data.op_classes)")
    span = browser.execute_script("return npuprof.state.data.span_us")
    browser.execute_script("npuprof.setView(0, arguments[0] / 40)", span)
    WebDriverWait(browser, 20).until(
        lambda d: int(d.find_element(By.ID, "timeline").get_attribute("data-kernels-drawn")) > 0
    )
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text


def test_the_pipeline_chart_draws_each_stage_and_its_passes_on_the_real_qwen3_capture(browser, tmp_path):
    """TP1 PP2 DP2: ranks 0 and 2 are stages 0 and 1, each running 2 micro-batches forward and back
    (stage 0 F0 F1 B0 B1, the last stage 1F1B), read from their kernels alone. Opened from file:// with
    its assets beside it, as a double-click opens it: no console error from load to the last click."""
    from conftest import QWEN_TRAINING

    out = tmp_path / "out"
    analyze(QWEN_TRAINING, out, jobs=2, options=AnalyzeOptions(mode="full"))
    schedule = pd.read_csv(out / schema.PP_SCHEDULE_CSV.file).set_index("rank_id")
    console_errors(browser)  # drop what earlier pages logged
    open_report(browser, (out / "report" / "report.html").as_uri())
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "report-qwen3-file-url.png"))  # docs/'s picture of it
    canvas = browser.find_element(By.ID, "pp-chart")
    assert browser.find_element(By.ID, "pp-section").is_displayed()
    assert canvas.get_attribute("data-rows") == "2" and canvas.get_attribute("data-blocks") == "8"
    rows = [p.text for p in browser.find_elements(By.CSS_SELECTOR, "#pp-rows p")]
    assert rows[0].startswith(f"stage 0 (rank 0): {schedule.loc[0, 'schedule']}")
    assert rows[1].startswith(f"stage 1 (rank 2): {schedule.loc[2, 'schedule']}")
    chart = browser.execute_script("return npuprof.state.data.pp")
    first, last = chart["rows"]
    assert [p[0] for p in first["passes"]] == ["F0", "F1", "B0", "B1"]
    assert first["passes"][0][1] == 0.0 and last["passes"][0][1] > first["passes"][0][2] * 0.5  # stage 1 starts later
    # the last stage's LM head and eager loss run between its passes: drawn as compute, not left blank
    findings = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]
    (loss,) = [f for f in findings if f["finding_type"] == "unfused_loss_chain"]
    assert sum(busy for _, _, busy in last["other"]) >= loss["metrics"]["kernel_ms"] > 90
    assert int(canvas.get_attribute("data-others")) == len(first["other"]) + len(last["other"]) >= 2
    # a finding whose evidence starts the capture frames it from 0, not before the capture starts
    span = browser.execute_script("return npuprof.state.data.span_us")
    for button in browser.find_elements(By.CSS_SELECTOR, "#findings button"):
        button.click()
        start, end = view_of(browser)
        assert 0 <= start < end <= span
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.find_element(By.ID, "pp-section").screenshot(str(ARTIFACTS / "report-qwen3-pp.png"))
    trace = json.loads((out / schema.REPORT_TRACE).read_text())["traceEvents"]
    pp_spans = [e for e in trace if e.get("cat") == "pp"]
    assert sorted({e["pid"] for e in pp_spans}) == [0, 2] and len(pp_spans) == 8
    # the page says which ranks it cannot draw, and a one-step capture still lists its top operators
    assert "no device events on ranks 1, 3" in browser.find_element(By.ID, "identity").text
    assert "idle windows" in browser.find_element(By.ID, "legend").text
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "table.top-ops tr"))
    parts = browser.execute_script(
        "return [...document.querySelectorAll('#inspector .bar div')].map(e => parseFloat(e.style.width))"
    )
    # before the first kernel (the profiler's 0.2 ms Preparing) + head + main + tail = the step
    assert len(parts) == 4 and sum(parts) == pytest.approx(100.0, abs=0.5)
    assert browser.find_element(By.CSS_SELECTOR, "#kpis").text.count("%") == 3  # shares as percent
    from npuprof.pipeline.stages.report.glossary import GLOSSARY

    browser.find_element(By.CSS_SELECTOR, "#help summary").click()
    terms = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#glossary dt")]
    assert terms == [term for term, _ in GLOSSARY] and "device idle (idle_ms, idle_share)" in terms
    assert console_errors(browser) == []


def test_a_real_capture_report_paints_its_long_collective_and_asks_for_no_missing_file(browser, cnn_report):
    """The real CNN capture: its first all-reduce runs 26.9-113.4 ms of a 129 ms step (the headline's
    73 % exposed communication). The whole-capture view paints it over every bin it covers (busy share
    by overlap, not at its start alone), and the page requests no kernel chunk that was not written."""
    out = cnn_report
    console_errors(browser)  # drop what earlier pages logged
    open_report(browser, (out / "report" / "report.html").as_uri())
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "report-cnn-file-url.png"))  # docs/'s picture of it
    coarse = browser.execute_script("return npuprof.state.data.coarse")
    width = coarse["bin_us"]
    comm = pd.read_parquet(out / schema.COMMUNICATION_EVENTS.path, columns=["rank_id", "start_ns", "end_ns"])
    longest = comm.assign(ms=(comm["end_ns"] - comm["start_ns"]) / 1e6).sort_values("ms").iloc[-1]
    assert longest["ms"] > 80
    events = pd.read_parquet(out / schema.NORMALIZED_EVENTS, columns=["rank_id", "start_ns"])
    steps = pd.read_csv(out / schema.STEP_SUMMARY.file)  # a step starts before its first kernel
    origin = min(events["start_ns"].min(), steps["start_ns"].min())
    # its inner bins (two kept clear at each end: the page's origin may sit a bin from the events' first)
    first = int((longest["start_ns"] - origin) / 1000 // width) + 2
    last = int((longest["end_ns"] - origin) / 1000 // width) - 2
    lanes = [i for i, (rank, _) in enumerate(coarse["lanes"]) if rank == int(longest["rank_id"])]
    covered = [max(coarse["busy"][i][b] for i in lanes) for b in range(first, last + 1)]
    low = [(b, v) for b, v in zip(range(first, last + 1), covered) if v < 0.99]
    assert len(covered) > 100 and not low, (first, last, low[:5])  # every bin inside the collective drawn busy
    # ... in communication's colour, as the zoomed view paints its kernels: its lane's main kind
    held = [i for i in lanes if min(coarse["busy"][i][first : last + 1]) > 0.99]  # busy the whole collective
    assert held and all(coarse["kinds"][i] == "communication" for i in held)
    paint = "return COLORS[npuprof.state.data.coarse.kinds[arguments[0]]] === COLORS.communication"
    assert browser.execute_script(paint, held[0])
    span = browser.execute_script("return npuprof.state.data.span_us")
    browser.execute_script("npuprof.setView(arguments[0], arguments[1])", span * 0.49, span * 0.51)
    assert console_errors(browser) == []


def test_a_long_collective_is_drawn_and_clickable_zoomed_far_inside_it(browser, cnn_report):
    """Zoomed to 2 ms in the middle of the real CNN's 86 ms all-reduce (tens of chunks after the one it
    starts in), the collective is drawn across the view, and a click on it opens its operator card."""
    out = cnn_report
    console_errors(browser)
    open_report(browser, (out / "report" / "report.html").as_uri())
    comm = pd.read_parquet(out / schema.COMMUNICATION_EVENTS.path, columns=["name", "start_ns", "end_ns"])
    longest = comm.assign(ms=(comm["end_ns"] - comm["start_ns"]) / 1e6).sort_values("ms").iloc[-1]
    chunk_ms = browser.execute_script("return npuprof.state.data.chunk_us") / 1000
    assert longest["ms"] > 20 * chunk_ms  # it spans many chunks: drawn from one it does not start in
    # each stream row is labelled; the text capture's collectives carry no stream id and say what they are
    labels = [e.text for e in browser.find_elements(By.CLASS_NAME, "stream-label")]
    assert sorted(labels) == stream_labels(browser) and "collectives" in labels
    # on the page's clock (µs from the capture's first step or event; a rank's clock offset is µs,
    # nothing beside the collective's 43 ms half)
    events = pd.read_parquet(out / schema.NORMALIZED_EVENTS, columns=["start_ns"])
    steps = pd.read_csv(out / schema.STEP_SUMMARY.file)
    origin = min(events["start_ns"].min(), steps["start_ns"].min())
    middle_us = (longest["start_ns"] - origin) / 1000 + longest["ms"] * 750  # three quarters into it
    browser.execute_script("npuprof.setView(arguments[0], arguments[1])", middle_us - 1000, middle_us + 1000)
    WebDriverWait(browser, 20).until(
        lambda d: int(d.find_element(By.ID, "timeline").get_attribute("data-kernels-drawn")) > 0
    )
    drawn = browser.execute_script(
        "return npuprof.state.hits.filter(h => h[3][3] > 80000).map(h => [h[0], h[1], h[2], h[4].names[h[3][4]]]);"
    )
    assert drawn, "the all-reduce is not drawn inside itself"
    x0, y0, width, name = drawn[0]
    canvas = browser.find_element(By.ID, "timeline")
    assert x0 <= 0 and x0 + width >= int(canvas.get_attribute("width"))  # across the whole view
    click_canvas(browser, canvas, int(canvas.get_attribute("width")) / 2, y0 + 5)
    card = browser.find_element(By.ID, "card-body").text
    assert name in card and "duration" in card
    assert console_errors(browser) == []


def test_the_step_ledger_is_a_bar_per_rank_whose_segments_are_its_lines(browser, cnn_report):
    """The real CNN capture: one bar per rank, its segments covering the step (every line of
    step_ledger.csv, the small ones merged), each named with what explains it; the widest is the
    all-reduce idle the incomplete capture of its group causes, painted as a cause the capture cannot
    recover (not as a saving)."""
    out = cnn_report
    console_errors(browser)
    open_report(browser, (out / "report" / "report.html").as_uri())
    bars = browser.execute_script(
        "return [...document.querySelectorAll('#ledger .ledger-bar')].map(b => ({rank: b.dataset.rank, "
        "width: b.getBoundingClientRect().width, segments: [...b.children].map(s => ({title: s.title, "
        "kind: s.classList[1], width: s.getBoundingClientRect().width}))}))"
    )
    ledger = pd.read_csv(out / schema.STEP_LEDGER_CSV.file)
    assert sorted(int(b["rank"]) for b in bars) == sorted(ledger["rank_id"].unique())
    findings = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]
    (group,) = [f for f in findings if f["finding_type"] == "capture_incomplete_group"]
    for bar in bars:
        assert sum(s["width"] for s in bar["segments"]) == pytest.approx(bar["width"], rel=0.01)
        mine = ledger[ledger["rank_id"] == int(bar["rank"])]
        top = mine.sort_values("ms").iloc[-1]
        widest = max(bar["segments"], key=lambda s: s["width"])
        assert widest["title"].startswith(line_words(top["line"]) + ":") and widest["kind"] == "cause"
        assert top["explained_by"] == "cause:" + group["claim_id"] and "capture_incomplete_group" in widest["title"]
        assert "not recoverable from this capture" in widest["title"]
        named = {s["title"].split(":")[0] for s in bar["segments"]}
        assert set(mine.loc[mine["ms"] >= 0.005 * mine["wall_ms"], "line"].map(line_words)) <= named
        assert not any(name.startswith("communication unknown") for name in named)
    assert console_errors(browser) == []


def test_finding_cards_hold_their_long_kernel_names_and_the_findings_together(browser, cnn_report):
    """The real CNN capture: host_launch_bound names kernels like aclnnDropoutGenMaskV2_DSAGenBitMask_...
    — every finding card wraps its text inside its own width, and below them the page says what all
    findings fixed together give (diagnosis_findings.json's recoverable_together) and which checks it could
    not judge (its card names no core counts: block dims are not judged)."""
    out = cnn_report
    console_errors(browser)
    open_report(browser, (out / "report" / "report.html").as_uri())
    cards = browser.execute_script(
        "return [...document.querySelectorAll('#findings button')].map(b => ({text: b.textContent, "
        "scroll: b.scrollWidth, client: b.clientWidth, right: b.getBoundingClientRect().right, "
        "parent: b.parentElement.getBoundingClientRect().right}))"
    )
    assert any("aclnnDropoutGenMaskV2" in c["text"] for c in cards)
    for card in cards:
        assert card["scroll"] <= card["client"] + 1 and card["right"] <= card["parent"] + 1, card["text"][:60]
    together = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["recoverable_together"]
    said = browser.execute_script("return [...document.querySelectorAll('#findings p')].map(p => p.textContent)")
    assert any(f"{together['ms_per_step']:.2f} ms per step" in line for line in said), said
    assert any(line.startswith("Not judged: block_dim_underuse — ranks 0, 1 name no core counts") for line in said)
    assert console_errors(browser) == []


def test_an_idle_capture_is_said_above_its_findings(browser, tmp_path):
    """mstt's 26-kernel fragment: the page says it is an idle capture before any finding card, and the
    idle finding on it reads low confidence."""
    from conftest import MSTT

    out = tmp_path / "out"
    analyze(MSTT / "ut" / "advisor" / "compute_advice" / "data", out, jobs=1, options=AnalyzeOptions(mode="full"))
    console_errors(browser)
    open_report(browser, (out / "report" / "report.html").as_uri())
    texts = browser.execute_script("return [...document.querySelectorAll('#findings > *')].map(e => e.textContent)")
    assert texts[0].startswith("Capture health: rank(s) 0, step(s) 19: the device is busy 8.1 ms")
    assert "26 kernels" in texts[0]
    findings = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]
    assert findings and all(f["confidence"] == "low" for f in findings)
    assert console_errors(browser) == []


@pytest.fixture(scope="module")
def qwen3_report(tmp_path_factory) -> Path:
    """The real Qwen3 capture analyzed with the interactive report (its output dir)."""
    from conftest import QWEN_TRAINING

    out = tmp_path_factory.mktemp("qwen3") / "out"
    analyze(QWEN_TRAINING, out, jobs=2, options=AnalyzeOptions(mode="full"))
    return out


@pytest.mark.parametrize("capture", ["cnn_report", "qwen3_report"])
def test_each_finding_card_says_why_and_what_to_try_and_frames_its_evidence(browser, request, capture):
    """Both real captures: every finding card shows its confidence, its statistic against its threshold, the
    first evidence it cites and what to try (from its note); its click frames its first moment of evidence
    — the collective it names, a gap it counts — read from evidence_index.csv's kinds, else its step, and
    the view then holds it. CNN's capture_incomplete_group frames its 86 ms all-reduce (it zoomed to the
    last 8.8 ms one before)."""
    from npuprof.pipeline.stages.report.notes import remedy

    out = request.getfixturevalue(capture)
    open_report(browser, (out / "report" / "report.html").as_uri())
    findings = json.loads((out / schema.DIAGNOSIS_FINDINGS).read_text())["diagnosis_findings"]
    index = pd.read_csv(out / schema.EVIDENCE_INDEX_CSV.file).set_index("evidence_id")
    buttons = browser.find_elements(By.CSS_SELECTOR, "#findings button")
    facts = [p.text for p in browser.find_elements(By.CSS_SELECTOR, "#findings p.facts")]
    remedies = [p.text for p in browser.find_elements(By.CSS_SELECTOR, "#findings p.remedy")]
    assert len(buttons) == len(facts) == len(findings) >= 3
    assert len(remedies) == sum(1 for f in findings if remedy(f["finding_type"])) >= 3
    framed = {}
    for number, (finding, button, said) in enumerate(zip(findings, buttons, facts)):
        statistic = finding["statistic"]
        assert said.startswith(f"{finding['confidence']} confidence · {statistic['name']} = "), said
        threshold = float(f"{float(statistic['threshold']):.4g}")  # the card shows 4 significant digits
        assert f"(threshold {threshold:g})" in said and finding["evidence_ids"][0] in said
        cited = index.loc[[e for e in finding["evidence_ids"] if e in index.index]]
        moments = cited[cited["kind"].isin(["communication_op", "bubble_window"])]
        steps = cited[cited["kind"] == "step_window"]
        browser.find_element(By.ID, "zoom-reset").click()
        button.click()
        window = browser.execute_script(f"return npuprof.state.data.findings[{number}].window")
        start, end = view_of(browser)
        expected = moments.index[0] if len(moments) else steps.index[0] if len(steps) else window[3]
        assert window[3] == expected, finding["finding_type"]
        assert start <= window[1] and end >= window[2], (finding["finding_type"], window, start, end)
        framed[finding["finding_type"]] = index.loc[window[3]]
    if capture == "cnn_report":
        group = framed["capture_incomplete_group"]
        assert group["kind"] == "communication_op" and group["end_us"] - group["start_us"] > 80_000
    assert console_errors(browser) == []
