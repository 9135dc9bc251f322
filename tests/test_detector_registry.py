"""The detector registry is the one list of findings: every detector has its knowledge folder (its rules
and a note), one is added by adding its module and folder, the stage reads only what detectors declare,
and what synth can plant, the fleet view counts and the rules word are the registry's types (no second
hand-kept list)."""

from __future__ import annotations

import json
import sys

import pandas as pd
import pytest

from npuprof import knowledge
from npuprof.pipeline import schema
from npuprof.pipeline.stages.diagnostics import registry
from npuprof.pipeline.stages.diagnostics.context import (
    BASE_INPUTS,
    COMPOSED_INPUTS,
    DiagnosisContext,
    with_composed_reads,
)
from npuprof.synth.faults import PLANTABLE_FINDINGS

pytestmark = pytest.mark.xdist_group("planted")  # shares planted_outputs

# finding types from before every finding was planted in synth with a twin: the set may only shrink
NOT_YET_PLANTED = {
    "dp_workload_imbalance",
    "rank_workload_asymmetry",
    "recurring_bubble_pattern",
}


def test_what_synth_plants_and_the_fleet_counts_are_registered_finding_types():
    emitted = {t for d in registry.detectors() for t in d.finding_types}
    findings = set(knowledge.load("diagnosis_rules")["findings"])
    assert set(PLANTABLE_FINDINGS) <= emitted & findings
    assert findings - set(PLANTABLE_FINDINGS) == NOT_YET_PLANTED  # a new finding type comes with its planting
    fleet = knowledge.load("sweep_rules")["fleet"]["finding_types"]
    assert set(fleet) <= emitted and all({"column", "text"} <= set(spec) for spec in fleet.values())


def test_every_detector_has_its_folder_with_its_rules_and_a_note_that_names_its_findings():
    """One detector, one topic: its module and knowledge/detectors/<topic>/ share the name, the folder's
    rules are exactly the module's finding types, and its notes name each of them."""
    by_topic: dict[str, set[str]] = {}
    for detector in registry.detectors():
        by_topic.setdefault(detector.topic, set()).update(detector.finding_types)
        assert set(detector.reads) <= {*BASE_INPUTS, *COMPOSED_INPUTS, *registry.derived_inputs()}, detector.name
    assert set(knowledge.detector_topics()) == set(by_topic), "a knowledge folder without a module, or the reverse"
    notes = knowledge.notes()
    for topic, types in by_topic.items():
        rules = knowledge.detector_rules(topic)
        assert {t for entries in rules.values() for t in entries} == types, topic
        # every finding names the ledger lines it explains (on its ranks, and on the peers that wait for them)
        assert all({"own", "peers"} <= set(e.get("ledger", {})) for entries in rules.values() for e in entries.values())
        explained = {t for note in notes if note["topic"] == topic for t in note["finding_types"]}
        assert types <= explained, (topic, types - explained)
    loaded = knowledge.load("diagnosis_rules")
    assert set(loaded["findings"]) | set(loaded["annotations"]) == set().union(*by_topic.values())


def test_a_finding_type_two_folders_define_is_refused(tmp_path, monkeypatch):
    for topic in ("first", "second"):
        (tmp_path / "detectors" / topic).mkdir(parents=True)
        (tmp_path / "detectors" / topic / "rules.yaml").write_text("findings:\n  twice: {severity: low}\n")
    (tmp_path / "diagnosis_rules.yaml").write_text("findings: {}\nannotations: {}\n")
    monkeypatch.setattr(knowledge.resources, "files", lambda _: tmp_path)
    knowledge._load_file.cache_clear()
    try:
        with pytest.raises(ValueError, match="twice is defined by detectors/second and detectors/first"):
            knowledge.load("diagnosis_rules")
    finally:
        knowledge._load_file.cache_clear()


def test_a_detector_is_added_by_adding_its_module(tmp_path, monkeypatch):
    """Drop a module into the detectors package and the stage runs it: nothing else lists detectors."""
    (tmp_path / "probe_detector.py").write_text(
        "from npuprof.pipeline.stages.diagnostics.registry import detector\n"
        "@detector(finding_types=('probe',), reads={'steps': ('rank_id',)})\n"
        "def probe(inputs):\n"
        "    return [len(inputs.steps)]\n"
    )
    package = sys.modules[registry.DETECTOR_PACKAGE]
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
    registry._import_detector_modules.cache_clear()
    try:
        (probe,) = [d for d in registry.detectors() if d.name == "probe"]
        steps = pd.DataFrame({"rank_id": [0, 1, 2]})
        assert probe.detect(DiagnosisContext.from_frames({"steps": steps})) == [3]
    finally:
        registry._DETECTORS.pop("probe", None)
        sys.modules.pop(f"{registry.DETECTOR_PACKAGE}.probe_detector", None)
        registry._import_detector_modules.cache_clear()


def test_the_context_loads_only_what_detectors_declare(planted_outputs):
    from npuprof.pipeline.options import AnalyzeOptions
    from npuprof.pipeline.sources.discovery import RootInputs
    from npuprof.pipeline.stages.base import RootContext

    _, out = planted_outputs["slow_rank"]
    inputs = RootInputs.from_dict(json.loads((out / schema.SOURCE_INDEX).read_text())["inputs"])
    context = DiagnosisContext(RootContext(out, inputs, AnalyzeOptions()))
    slow = next(d for d in registry.detectors() if d.name == "slow_rank")
    slow.detect(context)
    # it reads the alignment, the step replay that prices it reads the alignment, the steps and which
    # groups the capture holds only in part (communication ops, links, group ranks), and what differs on
    # the slow card reads the profile's inputs
    assert set(context._loaded) == {
        *("alignment", "step_model", "steps", "card_profile", "comm_ops", "links", "group_ranks"),
        *("accounting", "operators", "idle_by_cause", "compute_work"),
    }
    declared = with_composed_reads(registry.declared_columns(registry.detectors()))["alignment"]
    assert set(context.alignment.columns) == set(declared)
    with pytest.raises(AttributeError, match="no diagnosis input called 'nonsense'"):
        context.nonsense  # noqa: B018


def test_every_detector_input_is_declared_on_the_context_with_its_type():
    """DiagnosisContext loads inputs by name through __getattr__, which hid them from an editor and a type
    checker: each input it knows (the earlier stages', the composed and the derived ones) is declared on
    the class with its type, and nothing else is declared."""
    from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext

    declared = set(DiagnosisContext.__annotations__)
    known = DiagnosisContext.from_frames({}).known()
    assert declared == known, (sorted(known - declared), sorted(declared - known))


def test_every_fault_module_mirrors_a_detector_and_every_finding_it_plants_has_a_test():
    """synth/faults/<topic>.py mirrors the detector of the same name: the finding types a fault module
    plants are the ones that detector reports (capture.py holds the capture conditions, which no finding
    reports); every type is planted by some scenario, and a test module names it (or is the topic's own,
    tests/test_<topic>.py) besides the tests that run every scenario."""
    from pathlib import Path

    from npuprof.synth import SCENARIOS
    from npuprof.synth.faults import FAULT_TYPES

    topic_of = {t: d.topic for d in registry.detectors() for t in d.finding_types}
    tests = {path.name: path.read_text() for path in Path(__file__).parent.glob("test_*.py")}
    planted = {fault.kind for scenario in SCENARIOS.values() for fault in scenario.faults}
    for kind, fault_type in FAULT_TYPES.items():
        assert fault_type.topic == ("capture" if fault_type.condition else topic_of.get(kind)), kind
        assert kind in planted, f"no scenario plants {kind}"
        if not fault_type.condition:
            named = [name for name, text in tests.items() if f'"{kind}"' in text]
            assert named or f"test_{fault_type.topic}.py" in tests, f"no test names {kind}"


def test_a_piece_a_fault_replaces_is_one_the_capture_model_builds():
    """A fault module changes the capture model only through pieces the layer builders name (``piece``):
    one that names a piece nobody builds would plant nothing."""
    import inspect

    from npuprof.synth import layers, models, vision
    from npuprof.synth.faults import FAULT_TYPES

    built = " ".join(inspect.getsource(module) for module in (layers, models, vision))
    for fault_type in FAULT_TYPES.values():
        for name in fault_type.pieces:
            assert f'"{name}"' in built, (fault_type.kind, name)
