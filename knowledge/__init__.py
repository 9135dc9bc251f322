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

from npuprof.knowledge import override_checks

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class OverrideError(ValueError):
    """A rule ``overridden`` was asked to set that the file does not hold, or a value of another kind."""


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` through libyaml when available: plain data only, never Python objects."""
    return yaml.load(text, Loader=SAFE_LOADER)  # the loader is a SafeLoader: no arbitrary objects


def load_setting(text: str) -> Any:
    """A ``--set`` value typed by a person: safe_load's data, refused (OverrideError) if it uses a YAML
    alias (a few bytes of them expand to gigabytes)."""
    try:
        return override_checks.parsed(text, SAFE_LOADER)
    except override_checks.UnsafeValue as exc:
        raise OverrideError(str(exc)) from None


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
        try:
            override_checks.check(dotted, old, value)
        except override_checks.UnsafeValue as exc:
            raise OverrideError(f"{name}.yaml {exc}") from None
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
    data = _read_mapping(resources.files(__name__).joinpath(f"{name}.yaml"), f"{name}.yaml")
    return _with_detector_rules(data) if name == DETECTOR_RULES else data


def _read_mapping(resource: Any, label: str) -> dict[str, Any]:
    try:
        text = resource.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"knowledge file {label} is not installed with npuprof") from exc
    data = safe_load(text)
    if not isinstance(data, dict):
        raise ValueError(f"knowledge file {label} must hold a mapping at top level")
    return data


# Each detector's rules and notes live in one folder, knowledge/detectors/<topic>/ (the topic is its
# module's name in pipeline/stages/diagnostics/detectors/): rules.yaml holds its ``findings:`` and
# ``annotations:`` entries, merged into diagnosis_rules at load; every *.md beside it is a note.
DETECTOR_RULES = "diagnosis_rules"
DETECTOR_DIR = "detectors"
_DETECTOR_SECTIONS = ("findings", "annotations")


def detector_topics() -> tuple[str, ...]:
    """The detector folders of ``knowledge/detectors/``, by name."""
    folder = resources.files(__name__).joinpath(DETECTOR_DIR)
    return tuple(sorted(r.name for r in folder.iterdir() if r.is_dir() and not r.name.startswith(("_", "."))))


def detector_rules(topic: str) -> dict[str, Any]:
    """``knowledge/detectors/<topic>/rules.yaml``: its ``findings`` and ``annotations`` entries."""
    label = f"{DETECTOR_DIR}/{topic}/rules.yaml"
    data = _read_mapping(resources.files(__name__).joinpath(DETECTOR_DIR, topic, "rules.yaml"), label)
    unknown = sorted(set(data) - set(_DETECTOR_SECTIONS))
    if unknown:
        raise ValueError(
            f"knowledge file {label}: unknown sections {unknown}; a detector's rules hold findings, annotations"
        )
    return data


def _with_detector_rules(data: dict[str, Any]) -> dict[str, Any]:
    """diagnosis_rules.yaml's shared rules with every detector folder's entries, folder by folder (findings of
    equal recoverable time are listed in this order); a type two folders define is refused."""
    merged = {**data, **{section: dict(data.get(section) or {}) for section in _DETECTOR_SECTIONS}}
    owner: dict[str, str] = {}
    for topic in detector_topics():
        for section, entries in detector_rules(topic).items():
            for finding_type, entry in (entries or {}).items():
                if finding_type in owner or finding_type in merged[section]:
                    first = owner.get(finding_type, DETECTOR_RULES)
                    raise ValueError(f"knowledge: {finding_type} is defined by detectors/{topic} and {first}")
                owner[finding_type] = f"detectors/{topic}"
                merged[section][finding_type] = entry
    return merged


@lru_cache(maxsize=None)
def notes() -> tuple[dict[str, Any], ...]:
    """The knowledge notes (``knowledge/detectors/<topic>/*.md``, by file name): ref, title, topic,
    finding types and remedy bullets (front matter: which bullet of "What to try" is each type's) and
    body."""
    found = []
    resources_by_name = [
        (resource, topic)
        for topic in detector_topics()
        for resource in resources.files(__name__).joinpath(DETECTOR_DIR, topic).iterdir()
        if resource.name.endswith(".md")
    ]
    for resource, topic in sorted(resources_by_name, key=lambda pair: pair[0].name):
        text = resource.read_text(encoding="utf-8")
        front, body = {}, text
        if text.startswith("---\n"):
            head, _, body = text[4:].partition("\n---\n")
            front = safe_load(head) or {}
        lines = body.strip().splitlines()
        title = lines[0].lstrip("# ").strip() if lines else resource.name
        found.append(
            {
                "ref": f"knowledge/{DETECTOR_DIR}/{topic}/{resource.name}",
                "title": title,
                "topic": topic,
                "finding_types": list(front.get("finding_types", [])),
                "remedy_bullets": dict(front.get("remedy_bullets", {})),
                "body": "\n".join(lines[1:]).strip(),
            }
        )
    return tuple(found)
