"""What a re-asked analysis (``npuprof diagnose --set KEY=VALUE``) may set a rule to.

A value typed on the command line is checked before it reaches the rules: a number must be finite (a
``.nan`` threshold makes every comparison false), a severity or confidence one of the known words, and a
text template may use only the placeholders the rule's own text uses, each by name (no ``{x.__class__}``
reaching into an object) and with a format width of at most three digits (``{ms:>600000000}`` builds a
600 MB string); a section keeps every key it holds. The YAML it is written in may not use aliases: an
alias bomb expands a few bytes into gigabytes.
"""

from __future__ import annotations

import math
import re
import string
from typing import Any

import yaml

LEVELS = ("high", "medium", "low")
LEVEL_KEYS = ("severity", "confidence")
# a format spec of fill/align, sign, #, 0, a width of 3 digits at most, grouping, precision, type
SPEC = re.compile(r"(.?[<>^=])?[+\- ]?#?0?\d{0,3}[,_]?(\.\d{1,2})?[a-zA-Z%]?")


class UnsafeValue(ValueError):
    """A --set value no rule may take: its message says what is wrong with it."""


def parsed(text: str, loader: type) -> Any:
    """The YAML ``text`` of a --set value as data; UnsafeValue when it uses an alias."""
    if any(isinstance(event, yaml.AliasEvent) for event in yaml.parse(text, Loader=loader)):
        raise UnsafeValue("YAML aliases are not taken in a --set value")
    return yaml.load(text, Loader=loader)


def check(dotted: str, old: Any, value: Any) -> None:
    """Raise UnsafeValue unless ``value`` may replace ``old`` at ``dotted``."""
    last = dotted.rsplit(".", 1)[-1]
    if isinstance(value, float) and not math.isfinite(value):
        raise UnsafeValue(f"{dotted} must be a finite number, not {value}")
    if last in LEVEL_KEYS and value not in LEVELS:
        raise UnsafeValue(f"{dotted} must be one of {', '.join(LEVELS)}, not {value!r}")
    if isinstance(value, str) and isinstance(old, str):
        _check_template(dotted, old, value)
    if isinstance(value, dict) and isinstance(old, dict) and set(old) - set(value):
        dropped = ", ".join(sorted(map(str, set(old) - set(value))))
        raise UnsafeValue(f"{dotted} may not drop what the rule holds ({dropped}): set its keys one by one")


def _check_template(dotted: str, old: str, value: str) -> None:
    allowed = {name for name, _ in _fields(dotted, old)}
    for name, spec in _fields(dotted, value):
        if name not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise UnsafeValue(f"{dotted} may use the placeholders its text uses ({known}), not {{{name}}}")
        if not SPEC.fullmatch(spec):
            raise UnsafeValue(f"{dotted}: {{{name}:{spec}}} is not a format this text takes")


def _fields(dotted: str, template: str) -> list[tuple[str, str]]:
    """(name, format spec) of each placeholder of ``template``; UnsafeValue for one that is not a plain
    name (an attribute, an index, a conversion) or a template that does not parse."""
    try:
        pieces = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise UnsafeValue(f"{dotted} is not a text template: {exc}") from None
    fields = []
    for _, name, spec, conversion in pieces:
        if name is None:
            continue
        if not name.isidentifier() or conversion or "{" in (spec or ""):
            raise UnsafeValue(f"{dotted}: {{{name}}} is not a placeholder by name")
        fields.append((name, spec or ""))
    return fields
