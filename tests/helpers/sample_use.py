"""Which tests read the real samples: found from the code, so that without the samples only those skip.

A test reads the samples when its code, a module-level function it calls, a fixture it requests or one
of its parameters reaches a path under the samples dir (``conftest.QWEN_TRAINING``, a module constant
built from it, a parametrized sample root ...)."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

TESTS = str(Path(__file__).resolve().parents[1])


def _holds_sample_path(value: Any, samples: Path, depth: int = 0) -> bool:
    if isinstance(value, Path):
        return value == samples or samples in value.parents
    if depth < 3 and isinstance(value, dict):
        return any(_holds_sample_path(v, samples, depth + 1) for v in value.values())
    if depth < 3 and isinstance(value, (list, tuple, set, frozenset)):
        return any(_holds_sample_path(v, samples, depth + 1) for v in value)
    return False


def _names_in(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names_in(const)
    return names


def _reaches_samples(function: Any, samples: Path, seen: set[int]) -> bool:
    function = getattr(function, "__wrapped__", function)
    code = getattr(function, "__code__", None)
    if code is None or id(code) in seen:
        return False
    seen.add(id(code))
    scope = getattr(function, "__globals__", {})
    for name in _names_in(code):
        if name not in scope:
            continue
        value = scope[name]
        if _holds_sample_path(value, samples):
            return True
        if isinstance(value, types.FunctionType) and value.__code__.co_filename.startswith(TESTS):
            if _reaches_samples(value, samples, seen):  # a helper of the suite's own: follow it
                return True
    return False


def reads_samples(item: Any, samples: Path) -> bool:
    """Whether the pytest item reads the samples (through its code, fixtures or parameters)."""
    seen: set[int] = set()
    if _reaches_samples(getattr(item, "function", None), samples, seen):
        return True
    callspec = getattr(item, "callspec", None)
    if callspec is not None and _holds_sample_path(list(callspec.params.values()), samples):
        return True
    fixtures = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    for definitions in fixtures.values():
        for definition in definitions:
            if _reaches_samples(definition.func, samples, seen):
                return True
    return False
