"""docs/architecture.md's picture of the house is the code's: the parts and the direction of their imports
are derived from every import statement (lazy ones inside functions too) and must be what the doc's
diagram says, and every ``npuprof.…`` import names a file where the doc's import map says it is."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"
PARTS = ("api", "workers", "deploy", "pipeline", "knowledge", "synth")
THIRD_PARTY = ("celery", "kombu", "redis", "paramiko", "flower")  # the service's and deploy's libraries


def _imported(path: Path) -> list[str]:
    """Every module an import statement of ``path`` names (``from npuprof import knowledge`` names
    ``npuprof.knowledge``); relative imports as absolute ones."""
    package = ["npuprof", *path.relative_to(REPO).parent.parts]
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            module = ".".join(filter(None, [base, node.module or ""]))
            names.append(module)
            names += [f"{module}.{alias.name}" for alias in node.names]  # a submodule, or an attribute
    return names


def derived_directions() -> dict[str, tuple[set[str], set[str]]]:
    """Per part: the other parts it imports, and the service / deploy libraries it imports."""
    directions = {}
    for part in PARTS:
        parts, libraries = set(), set()
        for path in (REPO / part).rglob("*.py"):
            for name in _imported(path):
                bits = name.split(".")
                if bits[0] == "npuprof" and len(bits) > 1 and bits[1] in PARTS and bits[1] != part:
                    parts.add(bits[1])
                elif bits[0] in THIRD_PARTY:
                    libraries.add(bits[0])
        directions[part] = (parts, libraries)
    return directions


def documented_directions() -> dict[str, tuple[set[str], set[str]]]:
    """The diagram under "Parts and their direction": ``part/  what it holds  → a, b (celery, redis)``;
    words in parentheses that are not libraries are asides."""
    section = DOC.read_text(encoding="utf-8").split("## Parts and their direction", 1)[1]
    block = section.split("```text", 1)[1].split("```", 1)[0]
    directions = {}
    for line in block.strip().splitlines():
        part = line.split("/", 1)[0].strip()
        arrow = line.split("→", 1)[1] if "→" in line else ""
        asides = " ".join(re.findall(r"\(([^)]*)\)", arrow))
        named = re.sub(r"\([^)]*\)", " ", arrow)
        directions[part] = (
            {word for word in re.findall(r"[a-z_]+", named) if word in PARTS},
            {word for word in re.findall(r"[a-z_]+", asides) if word in THIRD_PARTY},
        )
    return directions


def test_the_documented_directions_are_the_imports():
    derived, documented = derived_directions(), documented_directions()
    assert set(documented) == set(PARTS), sorted(documented)
    wrong = {
        part: f"→ {', '.join(sorted(parts)) or '(nothing)'}" + (f" ({', '.join(sorted(libs))})" if libs else "")
        for part, (parts, libs) in derived.items()
        if documented[part] != (parts, libs)
    }
    assert not wrong, f"docs/architecture.md's diagram should say: {wrong}"


def test_the_directions_have_no_cycle_and_the_analysis_knows_no_service():
    """pipeline imports knowledge alone; nothing the pipeline or knowledge imports reaches back up."""
    derived = derived_directions()
    assert derived["pipeline"] == ({"knowledge"}, set()) and derived["knowledge"] == (set(), set())
    seen: dict[str, set[str]] = {}

    def reach(part: str, path: tuple[str, ...]) -> set[str]:
        assert part not in path, f"import cycle: {' → '.join((*path, part))}"
        if part not in seen:
            seen[part] = set().union(*[{p} | reach(p, (*path, part)) for p in derived[part][0]])
        return seen[part]

    for part in PARTS:
        reach(part, ())


def _module_file(module: str) -> Path | None:
    """Where the import map puts ``npuprof.<part>.<rest>``: ``<part>/<rest>.py`` or its package's
    ``__init__.py`` (pyproject's package-dir maps each part to the folder of its name)."""
    bits = module.split(".")[1:]
    base = REPO.joinpath(*bits)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def test_every_npuprof_import_is_a_file_where_the_map_says():
    text = DOC.read_text(encoding="utf-8")
    assert (
        "`npuprof.pipeline.stages.diagnostics.findings` is `pipeline/stages/diagnostics/findings.py`" in text
    )  # the map's rule
    missing = []
    checked = 0
    for part in PARTS:
        for path in (REPO / part).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("npuprof."):
                    checked += 1
                    if _module_file(node.module) is None:
                        missing.append(f"{path.relative_to(REPO)}: {node.module}")
    assert checked > 500 and not missing, missing[:10]


def test_synth_shares_only_the_capture_formats_group_hash_with_the_analysis():
    """A generator that borrowed the analysis's code could agree with its bugs: synth reads nothing of the
    pipeline but the one definition of the format's group hash."""
    borrowed = {
        name
        for path in (REPO / "synth").rglob("*.py")
        for name in _imported(path)
        if name.startswith("npuprof.pipeline")
    }
    assert borrowed == {"npuprof.pipeline.sources.group_hash", "npuprof.pipeline.sources.group_hash.double_hash"}
