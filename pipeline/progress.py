"""Progress events: (stage, done, total, message), rendered by whoever runs the pipeline.

The pipeline only calls a ``Progress`` callable; the CLI draws a bar or prints JSON lines, and the
service publishes the same events as Celery task state ``PROGRESS``.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Protocol, TextIO

from npuprof.pipeline.terminal_text import printable


class Progress(Protocol):
    def __call__(self, stage: str, done: int, total: int, message: str = "") -> None: ...


def no_progress(stage: str, done: int, total: int, message: str = "") -> None:
    """A Progress that says nothing."""


class JsonLinesProgress:
    """One JSON object per event on a stream (stderr for the CLI)."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self.stream = stream

    def __call__(self, stage: str, done: int, total: int, message: str = "") -> None:
        event = {
            "event": "progress",
            "stage": stage,
            "done": done,
            "total": total,
            "message": message,
            "time": round(time.time(), 3),
        }
        self.stream.write(json.dumps(event) + "\n")
        self.stream.flush()


class BarProgress:
    """A one-line progress bar redrawn in place (for a TTY)."""

    def __init__(self, stream: TextIO = sys.stderr, width: int = 28) -> None:
        self.stream = stream
        self.width = width
        self.started = time.monotonic()

    def __call__(self, stage: str, done: int, total: int, message: str = "") -> None:
        fraction = done / total if total else 1.0
        filled = int(round(fraction * self.width))
        bar = "#" * filled + "-" * (self.width - filled)
        elapsed = time.monotonic() - self.started
        line = f"\r{stage:<12} [{bar}] {done}/{total} {elapsed:6.1f}s {printable(message)[:40]:<40}"
        self.stream.write(line)
        global _open_bar
        _open_bar = self.stream
        if total and done >= total:
            self.stream.write("\n")
            _open_bar = None
        self.stream.flush()


_open_bar: TextIO | None = None  # the stream a bar's line is still open on (drawn, no newline yet)


def end_open_bar() -> None:
    """End a progress bar's line left open (a failure mid-stage), so what is written next starts a line
    of its own instead of trailing the bar."""
    global _open_bar
    if _open_bar is not None:
        _open_bar.write("\n")
        _open_bar.flush()
        _open_bar = None


def make_progress(kind: str, stream: TextIO = sys.stderr) -> Progress:
    """``auto`` draws a bar on a TTY and stays quiet otherwise; ``bar``, ``json``, ``none`` as named."""
    if kind == "auto":
        kind = "bar" if stream.isatty() else "none"
    if kind == "bar":
        return BarProgress(stream)
    if kind == "json":
        return JsonLinesProgress(stream)
    return no_progress
