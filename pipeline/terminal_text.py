"""Text from profiling data made safe for a terminal or a log line: control characters (an escape
sequence in a kernel name can clear the screen, set the window title or hide text; a newline in a
root's path splits a status row) are shown as escapes instead of acting. Light: the CLI's printing
imports it without pandas or Arrow."""

from __future__ import annotations

# C0 controls, DEL and C1 controls, each shown as its \\xNN escape
_CONTROLS = {code: f"\\x{code:02x}" for code in [*range(0x00, 0x20), *range(0x7F, 0xA0)]}


def printable(text: object) -> str:
    """``text`` with every control character (newline and tab included) replaced by its escape."""
    return str(text).translate(_CONTROLS)


_LOG_CONTROLS = {code: escape for code, escape in _CONTROLS.items() if code != 0x0A}


def loggable(text: object) -> str:
    """``text`` for a log: every control character escaped but the newline (a traceback keeps its lines)."""
    return str(text).translate(_LOG_CONTROLS)
