"""The headless Chromium the browser tests drive (Debian's chromium + chromium-driver, through selenium),
imported only when a test asks for it."""

from __future__ import annotations

from typing import Any

from helpers import prerequisites

BROWSER_PREREQUISITES = ("selenium", "chromium", "chromedriver")
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000", "--disable-dev-shm-usage")


def start_browser() -> Any:
    """A new headless Chromium whose console messages are kept (console errors are test failures)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(prerequisites.binary("chromedriver")), options=options)


def console_errors(driver: Any) -> list[str]:
    """The SEVERE console messages logged since the last call (reading the log empties it)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def open_report(driver: Any, url: str) -> None:
    """Open an npuprof report page and wait until it says it is ready."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url)
    WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.body.dataset.ready") == "true")


def click_canvas(driver: Any, canvas: Any, x: float, y: float) -> None:
    """A click (mousedown, mouseup) at ``(x, y)`` in the canvas's own pixels, as the page's handlers see it."""
    left, top = driver.execute_script("const r = arguments[0].getBoundingClientRect(); return [r.left, r.top];", canvas)
    driver.execute_script(
        "const c = arguments[0]; for (const t of ['mousedown', 'mouseup']) c.dispatchEvent(new MouseEvent(t, "
        "{bubbles: true, clientX: arguments[1], clientY: arguments[2]}));",
        canvas,
        left + x,
        top + y,
    )
