"""Rules that change with new models and captures, kept as YAML and loaded at run time.

Python holds the mechanisms that apply these rules; the rules themselves live in the YAML files
beside this module (package data), read with PyYAML's safe loader only (its libyaml build where
PyYAML has one: the same safe subset, about ten times faster — every process loads these once).
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` through libyaml when available: plain data only, never Python objects."""
    return yaml.load(text, Loader=SAFE_LOADER)  # the loader is a SafeLoader: no arbitrary objects


@lru_cache(maxsize=None)
def load(name: str) -> dict[str, Any]:
    """Load ``knowledge/<name>.yaml`` (cached; callers must not mutate the result)."""
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
