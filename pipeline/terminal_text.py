"""Text from profiling data made safe for a terminal or a log line: control characters (an escape
sequence in a kernel name can clear the screen, set the window title or hide text; a newline in a
root's path splits a status row) are shown as escapes instead of acting. Light: the CLI's printing
imports it without pandas or Arrow."""

from __future__ import annotations

# C0 controls, DEL and C1 controls, each shown as its \\xNN escape
_CONTROLS = {code: f"\\x{code:02x}" for code in [*range(0x00, 0x20), *range(0x7F, 0xA0)]}
# the bidirectional controls (a U+202E in a kernel name shows the rest of the line reversed, so text
# reads other than it is), each shown as its \\uNNNN escape
BIDI_CONTROLS = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_CONTROLS.update({code: f"\\u{code:04x}" for code in BIDI_CONTROLS})


def printable(text: object) -> str:
    """``text`` with every control character (newline and tab included) replaced by its escape."""
    return str(text).translate(_CONTROLS)


_LOG_CONTROLS = {code: escape for code, escape in _CONTROLS.items() if code != 0x0A}


def loggable(text: object) -> str:
    """``text`` for a log: every control character escaped but the newline (a traceback keeps its lines)."""
    return str(text).translate(_LOG_CONTROLS)
