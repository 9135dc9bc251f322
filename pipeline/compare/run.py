"""``compare(baseline, new, out)``: the comparison tables, compare_summary.json and compare.md.

Refuses two captures of different models (their fingerprints disagree on an identity field): class
by class they share nothing, and pairing unlike things would invent deltas.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

from npuprof import knowledge
from npuprof.pipeline import __version__, io, schema
from npuprof.pipeline.compare.findings import findings_diff
from npuprof.pipeline.compare.html import compare_html
from npuprof.pipeline.compare.render import compare_markdown, compare_summary
from npuprof.pipeline.compare.sides import Side, load_side
from npuprof.pipeline.compare.tables import class_table, communication_table, operator_table, overview_table
from npuprof.pipeline.errors import UsageError


def structure(base: Side, new: Side) -> dict:
    """Do the two captures run the same model? Fingerprint identity fields and layer counts."""
    fields = knowledge.load("compare_rules")["model_identity_fields"]

    def value(side: Side, name: str):
        return ((side.model.get("fingerprint") or {}).get(name) or {}).get("value")

    differing = {
        name: [value(base, name), value(new, name)]
        for name in fields
        if value(base, name) is not None and value(new, name) is not None and value(base, name) != value(new, name)
    }
    layers = [value(base, "num_hidden_layers"), value(new, "num_hidden_layers")]
    notes, not_comparable = [], []
    if layers[0] is not None and layers[1] is not None and layers[0] != layers[1]:
        # a step of more layers is longer by construction: its wall says nothing about speed
        not_comparable.append(f"decoder layers differ ({layers[0]} vs {layers[1]})")
        notes.append(f"decoder layers differ ({layers[0]} vs {layers[1]}): only layer classes present on both compare")
    return {
        "same_model": not differing,
        "differing_fields": differing,
        "layers": layers,
        "not_comparable": not_comparable,
        "notes": notes,
    }


def compare_tables(base: Side, new: Side) -> dict[str, pd.DataFrame]:
    """Every comparison table by its file name."""
    sides = (base, new)
    return {
        schema.COMPARE_OVERVIEW: overview_table(sides),
        schema.COMPARE_STEP_CLASSES: class_table(base.steps, new.steps, "step_class_id", [], sides),
        schema.COMPARE_LAYER_CLASSES: class_table(base.layers, new.layers, "layer_class_id", ["layer_role"], sides),
        schema.COMPARE_BLOCK_CLASSES: class_table(
            base.blocks, new.blocks, "block_class_id", ["block_kind", "layer_role"], sides
        ),
        schema.COMPARE_OPERATORS: operator_table(sides),
        schema.COMPARE_COMMUNICATION: communication_table(sides),
    }


def compare(baseline: str | Path, new: str | Path, out_dir: str | Path) -> dict:
    """Compare two analyzed outputs into ``out_dir``; returns the summary document."""
    with ThreadPoolExecutor(max_workers=2) as pool:  # Arrow reads and encodes release the GIL
        base_side, new_side = pool.map(load_side, (baseline, new))
    shape = structure(base_side, new_side)
    if not shape["same_model"]:
        fields = ", ".join(f"{k} {v[0]} vs {v[1]}" for k, v in shape["differing_fields"].items())
        raise UsageError(f"the two captures run different models ({fields}): nothing to compare class by class")
    tables = compare_tables(base_side, new_side)
    changes = findings_diff(base_side.findings, new_side.findings)
    summary = compare_summary(base_side, new_side, tables, changes, shape)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, frame in tables.items():
        io.write_csv(out / name, frame)
    io.write_json(out / schema.COMPARE_FINDINGS, changes)
    io.write_json(out / schema.COMPARE_SUMMARY, summary)
    io.write_bytes(out / schema.COMPARE_MD, compare_markdown(summary, tables))
    io.write_bytes(out / schema.COMPARE_HTML, compare_html(base_side, new_side, tables, summary))
    return {"status": "ok", "tool_version": __version__, "output_dir": str(out), **summary["headline"]}
