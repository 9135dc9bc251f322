"""Rules that change with new models and captures, kept as YAML and loaded at run time.

Python holds the mechanisms that apply these rules; the rules themselves live in the YAML files
beside this module (package data), read with PyYAML's safe loader only (its libyaml build where
PyYAML has one: the same safe subset, about ten times faster — every process loads these once).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class OverrideError(ValueError):
    """A rule ``overridden`` was asked to set that the file does not hold, or a value of another kind."""


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` through libyaml when available: plain data only, never Python objects."""
    return yaml.load(text, Loader=SAFE_LOADER)  # the loader is a SafeLoader: no arbitrary objects


# rules a re-asked analysis sets for a while (``overridden``): knowledge file name -> its patched copy,
# and the dotted values set
_OVERRIDDEN: dict[str, dict[str, Any]] = {}
_OVERRIDE_VALUES: dict[str, dict[str, Any]] = {}


def load(name: str) -> dict[str, Any]:
    """``knowledge/<name>.yaml`` as a mapping (cached; callers must not mutate the result), with the
    values ``overridden`` sets while its block runs."""
    return _OVERRIDDEN.get(name) or _load_file(name)


@contextmanager
def overridden(name: str, values: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Within the block, ``load(name)`` answers with each dotted key of ``values`` set
    (``findings.slow_rank_suspected.min_ratio``): how a finished analysis is asked again with other
    thresholds. A key the file does not hold, or a value of another kind than the one it replaces, is a
    ``OverrideError`` naming it (a typo must not silently change nothing)."""
    patched = copy.deepcopy(_OVERRIDDEN.get(name) or _load_file(name))
    for dotted, value in values.items():
        *path, last = dotted.split(".")
        node: Any = patched
        for part in path:
            if not isinstance(node, dict) or part not in node:
                raise OverrideError(f"{name}.yaml has no {dotted!r} ({part!r} not found)")
            node = node[part]
        if not isinstance(node, dict) or last not in node:
            held = ", ".join(sorted(str(k) for k in node)) if isinstance(node, dict) else "no keys"
            raise OverrideError(f"{name}.yaml has no {dotted!r} ({last!r} not found; it holds {held})")
        old = node[last]
        number = (int, float)
        same = isinstance(value, number) and isinstance(old, number) and not isinstance(value, bool)
        if not same and type(value) is not type(old):
            raise OverrideError(f"{name}.yaml {dotted} is {type(old).__name__} {old!r}, not {type(value).__name__}")
        node[last] = value
    previous, previous_values = _OVERRIDDEN.get(name), _OVERRIDE_VALUES.get(name, {})
    _OVERRIDDEN[name], _OVERRIDE_VALUES[name] = patched, {**previous_values, **values}
    try:
        yield patched
    finally:
        if previous is None:
            _OVERRIDDEN.pop(name, None)
            _OVERRIDE_VALUES.pop(name, None)
        else:
            _OVERRIDDEN[name], _OVERRIDE_VALUES[name] = previous, previous_values


def overrides(name: str) -> dict[str, Any]:
    """The dotted values ``overridden`` sets on ``knowledge/<name>.yaml`` now (empty outside its block)."""
    return dict(_OVERRIDE_VALUES.get(name, {}))


@lru_cache(maxsize=None)
def _load_file(name: str) -> dict[str, Any]:
    resource = resources.files(__name__).joinpath(f"{name}.yaml")
    try:
        text = resource.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"knowledge file {name}.yaml is not installed with npuprof") from exc
    data = safe_load(text)
    if not isinstance(data, dict):
        raise ValueError(f"knowledge file {name}.yaml must hold a mapping at top level")
    return data


@lru_cache(maxsize=None)
def notes() -> tuple[dict[str, Any], ...]:
    """The knowledge notes (``knowledge/notes/*.md``): ref, title, finding types (front matter) and body."""
    found = []
    for resource in sorted(resources.files(__name__).joinpath("notes").iterdir(), key=lambda r: r.name):
        if not resource.name.endswith(".md"):
            continue
        text = resource.read_text(encoding="utf-8")
        front, body = {}, text
        if text.startswith("---\n"):
            head, _, body = text[4:].partition("\n---\n")
            front = safe_load(head) or {}
        lines = body.strip().splitlines()
        title = lines[0].lstrip("# ").strip() if lines else resource.name
        found.append(
            {
                "ref": f"knowledge/notes/{resource.name}",
                "title": title,
                "finding_types": list(front.get("finding_types", [])),
                "body": "\n".join(lines[1:]).strip(),
            }
        )
    return tuple(found)
