"""The YAML knowledge and the code agree: every enum value emitted is declared, and vice versa."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from npuprof import knowledge
from npuprof.pipeline import kernel_categories

REPO = Path(__file__).resolve().parents[1]


def test_rule_categories_and_roles_are_exactly_the_declared_ones():
    conventions = knowledge.load("semantic_conventions")
    rules = knowledge.load("kernel_signatures")["rules"]
    used_categories = {c for r in rules for c in r.get("categories", [])}
    used_roles = {r_ for r in rules for r_ in r.get("roles", [])}
    assert used_categories == set(conventions["categories"])
    # dummy_or_reduced_work is set by later stages, not by the name rules.
    assert used_roles | {"dummy_or_reduced_work"} == set(conventions["roles"])


def test_op_types_emitted_are_exactly_the_declared_ones():
    declared = set(knowledge.load("semantic_conventions")["op_type"])
    source = (REPO / "pipeline" / "kernel_categories.py").read_text()
    by_core = knowledge.load("kernel_signatures")["op_type_by_core"]
    emitted = set(re.findall(r'"(aic|aiv|mix_cv|mix_comm_aiv|communication|aicpu|dsa|unknown)"', source))
    emitted |= set(by_core["exact"].values()) | {r["op_type"] for r in by_core["fallback"]} | {by_core["default"]}
    assert emitted == declared
    for core in ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "COMMUNICATION", "AI_CPU", "DSA_SQE", None):
        assert kernel_categories.op_type_of_core(core) in declared


def test_source_kinds_written_are_declared():
    declared = set(knowledge.load("semantic_conventions")["source_kind"])
    from npuprof.pipeline.sources.discovery import SUPPLEMENTAL

    assert set(SUPPLEMENTAL) <= declared
    assert {"kernel_details_csv", "op_summary_csv", "profiler_db"} <= declared


def test_every_rule_has_an_id_and_a_clause():
    clauses = {"any_of", "all_of", "none_of", "starts_with_any"}
    for rule in knowledge.load("kernel_signatures")["rules"]:
        assert rule.get("id")
        assert clauses & set(rule), rule["id"]


@pytest.mark.xdist_group("planted")  # shares planted_outputs
def test_block_kinds_layer_roles_and_anomaly_tags_are_declared(planted_outputs):
    import pandas as pd

    conventions = knowledge.load("semantic_conventions")
    for scenario in ("mixed", "partial_capture"):
        _, out = planted_outputs[scenario]
        blocks = pd.read_csv(out / "block_summary.csv")
        layers = pd.read_csv(out / "layer_summary.csv")
        steps = pd.read_csv(out / "step_anomalies.csv")
        assert set(blocks["block_kind"]) <= set(conventions["block_kind"])
        assert set(layers["layer_role"]) <= set(conventions["layer_role"])
        tags = {t for value in steps["anomaly_tags"].dropna() for t in value.split(";") if t}
        assert tags <= set(conventions["anomaly_tag"])
    assert set(knowledge.load("diagnosis_rules")["anomaly_tags"]) == set(conventions["anomaly_tag"])


def test_the_knowledge_loader_is_safe_and_reads_what_pyyaml_safe_load_reads():
    with pytest.raises(yaml.YAMLError):
        knowledge.safe_load("!!python/object/apply:os.system ['echo pwned']")
    text = "a: [1, 2.5, x]\nb: {c: null, d: true}\n"
    assert knowledge.safe_load(text) == yaml.safe_load(text)
