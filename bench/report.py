"""Benchmark: the report stage, and how fast report.html paints.

1. The report stage (fast mode) on the 8-rank × 250 k-event root of bench/normalize.py against a bare
   ``pyarrow.csv.read_csv`` of its kernel_details files (target ≤ 1×), and the full mode beside it.
2. First paint of report.html's overview in headless Chromium, served over local HTTP (target < 2 s).

Usage: ``python bench/report.py [--ranks 8] [--rows 250000] [--work DIR]`` (needs chromium-driver).
"""

from __future__ import annotations

import functools
import gc
import http.server
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from normalize import bare_read_seconds, bench_root  # noqa: E402

from npuprof.pipeline.options import AnalyzeOptions  # noqa: E402
from npuprof.pipeline.runner import StageRange, analyze  # noqa: E402


def report_seconds(out: Path, mode: str, jobs: int) -> float:
    started = time.perf_counter()
    analyze(None, out, jobs=jobs, stage_range=StageRange(only_stage="report"), options=AnalyzeOptions(mode=mode))
    return time.perf_counter() - started


def first_paint_seconds(report_dir: Path) -> float:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(report_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        started = time.perf_counter()
        driver.get(f"http://127.0.0.1:{server.server_address[1]}/report.html")
        WebDriverWait(driver, 60).until(lambda d: d.execute_script("return document.body.dataset.ready") == "true")
        return time.perf_counter() - started
    finally:
        driver.quit()
        server.shutdown()


def main() -> None:
    args, root, files = bench_root(__doc__)
    out = args.work / "report_out"
    analyze(root, out, jobs=args.jobs, overwrite=True, stage_range=StageRange(to_stage="diagnostics"))
    bare_read_seconds(files)
    gc.collect()
    bare = bare_read_seconds(files)
    fast = report_seconds(out, "fast", args.jobs)
    full = report_seconds(out, "full", args.jobs)
    paint = first_paint_seconds(out / "report")
    print(
        json.dumps(
            {
                "bare_read_s": round(bare, 3),
                "report_fast_s": round(fast, 3),
                "fast_over_bare_read": round(fast / bare, 3),
                "target_fast": "<= 1",
                "report_full_s": round(full, 3),
                "html_first_paint_s": round(paint, 3),
                "target_first_paint": "< 2 s",
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
