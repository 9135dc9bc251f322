"""The shape of the code: tables declared once, one I/O layer, stages that supply their own headline,
projected reads, rules as data, and service commands that behave as users expect."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from npuprof import knowledge
from npuprof.api.cli import build_parser
from npuprof.pipeline import io, schema
from npuprof.pipeline.errors import EXIT_SERVICE_UNAVAILABLE
from npuprof.pipeline.execution import write_result
from npuprof.pipeline.options import AnalyzeOptions
from npuprof.pipeline.runner import analyze
from npuprof.pipeline.stage_range import StageRange, resolve_stage_range
from npuprof.pipeline.stages import STAGE_NAMES, STAGES, stage
from npuprof.pipeline.stages.base import StageResult
from npuprof.pipeline.sweep.roots import find_roots
from npuprof.synth import generate
from npuprof.workers.launch import worker_command

REPO = Path(__file__).resolve().parents[1]
PRODUCT_DIRS = ("pipeline", "workers", "api")
# An input file that happens to share an artifact's name: the collection manifest a capture ships.
INPUT_NAMES_ALLOWED = {("pipeline/sources/discovery.py", schema.TOP_MANIFEST)}


def _declared_names() -> set[str]:
    names = {t.name for t in schema.TABLES} | {v.file for v in schema.CSV_VIEWS}
    names |= {
        value
        for key, value in vars(schema).items()
        if key.isupper() and isinstance(value, str) and value.endswith((".json", ".csv", ".md", ".parquet"))
    }
    names |= {schema.stage_manifest_name(s.name) for s in STAGES}
    return names


def _product_files() -> list[Path]:
    return [
        p
        for d in PRODUCT_DIRS
        for p in sorted((REPO / d).rglob("*.py"))
        if "schema" not in p.relative_to(REPO).parts[:2] or p.relative_to(REPO).parts[0] != "pipeline"
    ]


def _string_constants(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_no_table_or_artifact_name_is_spelled_outside_the_schema_modules():
    declared = _declared_names()
    found = []
    for path in _product_files():
        relative = str(path.relative_to(REPO))
        for line, value in _string_constants(path):
            if (value in declared or "rank_id=" in value) and (relative, value) not in INPUT_NAMES_ALLOWED:
                found.append(f"{relative}:{line}: {value!r}")
    assert not found, "table / artifact names spelled outside pipeline/schema/:\n" + "\n".join(found)


def test_each_event_projection_is_declared_once():
    event_columns = [
        f"{path.relative_to(REPO)}"
        for path in _product_files()
        if "EVENT_COLUMNS =" in path.read_text(encoding="utf-8")
    ]
    assert event_columns == []
    assert schema.EVENT_COLUMNS == tuple(schema.EVENT_SCHEMA.names)


def test_functions_of_the_product_stay_short():
    long_functions = []
    for path in _product_files() + sorted((REPO / "pipeline" / "schema").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > 60:
                    long_functions.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({length} lines)")
    assert not long_functions, long_functions


def test_no_module_of_the_product_is_over_500_lines():
    modules = [p for part in ("api", "pipeline", "workers", "deploy") for p in sorted((REPO / part).rglob("*.py"))]
    long_modules = [
        f"{p.relative_to(REPO)} ({n} lines)" for p in modules if (n := len(p.read_text("utf-8").splitlines())) > 500
    ]
    assert modules and not long_modules, long_modules


def test_read_dataset_projects_columns_and_pushes_filters_down(tmp_path):
    for rank in (0, 1):
        frame = pd.DataFrame(
            {
                "step_ordinal": [0, 1, 2],
                "step_id": [1, 2, 3],
                **{c: [None] * 3 for c in schema.STEP_SEGMENTS.columns if c not in ("step_ordinal", "step_id")},
            }
        )
        frame["complete"] = [True, True, rank == 0]
        result = StageResult(tables={schema.STEP_SEGMENTS: frame})
        write_result(tmp_path, stage("segment"), result, rank_id=rank)
    table = io.read_dataset(
        tmp_path, schema.STEP_SEGMENTS, columns=["step_id"], filter=pc.field("complete") == pa.scalar(False)
    )
    assert table.column_names == ["step_id", "rank_id"]
    assert table.to_pylist() == [{"step_id": 3, "rank_id": 1}]
    one_rank = io.read_dataset(tmp_path, schema.STEP_SEGMENTS, 0, columns=["step_ordinal"])
    assert one_rank.column_names == ["step_ordinal"] and one_rank.num_rows == 3


def test_tables_conform_to_their_declaration_and_undeclared_columns_are_refused():
    empty = schema.LAYER_CLASSES.conform(pd.DataFrame())
    assert empty.schema == schema.LAYER_CLASSES.schema and empty.num_rows == 0
    with pytest.raises(ValueError, match="undeclared"):
        schema.LAYER_CLASSES.conform(pd.DataFrame({c: [1] for c in (*schema.LAYER_CLASSES.columns, "surprise")}))


def test_rendered_artifacts_are_written_atomically_where_the_stage_says(tmp_path):
    result = StageResult(
        rendered={schema.REPORT_MD: "# report\n", f"{schema.REPORT_DIR}/assets/x.json.gz": b"\x1f\x8b"}
    )
    write_result(tmp_path, stage("report"), result, rank_id=None)
    assert (tmp_path / schema.REPORT_MD).read_text() == "# report\n"
    assert (tmp_path / schema.REPORT_DIR / "assets" / "x.json.gz").read_bytes() == b"\x1f\x8b"
    assert not list(tmp_path.rglob("*.tmp"))


def test_a_stage_may_write_only_what_it_declares(tmp_path):
    """An artifact a stage does not declare is refused before anything of the result is written."""
    result = StageResult(json_files={schema.DIAGNOSIS_FINDINGS: {}, "surprise.json": {}})
    with pytest.raises(RuntimeError, match="diagnostics returned artifacts it does not declare: surprise.json"):
        write_result(tmp_path, stage("diagnostics"), result, rank_id=None)
    assert not list(tmp_path.iterdir())
    elsewhere = StageResult(csv_views={schema.STEP_SUMMARY: pd.DataFrame()})  # classify's view, not summarize's
    with pytest.raises(RuntimeError, match="step_summary.csv"):
        write_result(tmp_path, stage("summarize"), elsewhere, rank_id=None)


def test_optional_outputs_are_ours_and_go_when_a_rerun_does_not_write_them(tmp_path):
    """--model-config adds three CSVs: --overwrite must accept them as npuprof's own, and a re-run of
    the model stage without the config must not leave them stale beside a manifest that has no config."""
    root = Path(generate(tmp_path / "root", "clean", seed=2, ranks=2, steps=2)["root"])
    config = tmp_path / "config.json"
    truth = json.loads((root / "ground_truth.json").read_text())
    config.write_text(json.dumps(truth["model"]["config"]))
    out = tmp_path / "out"
    optional = [out / view.file for view in schema.MODEL_CONFIG_CSVS]
    to_model = StageRange(to_stage="model")
    analyze(root, out, jobs=1, stage_range=to_model, options=AnalyzeOptions(model_config=str(config)))
    assert all(p.is_file() for p in optional)
    analyze(root, out, jobs=1, stage_range=StageRange(from_stage="model", to_stage="model"))
    assert not any(p.exists() for p in optional)
    analyze(root, out, jobs=1, stage_range=to_model, options=AnalyzeOptions(model_config=str(config)), overwrite=True)
    analyze(root, out, jobs=1, stage_range=to_model, overwrite=True)
    assert not any(p.exists() for p in optional)


def test_failure_json_has_one_writer_and_one_reader(tmp_path):
    written = io.write_failure(
        tmp_path, {"phase": "normalize (rank 2)", "kind": "bad_input", "error": "x", "exit_code": 3}
    )
    assert io.read_failure(tmp_path) == written
    assert written["status"] == "failed" and written["failed_at"] and written["exit_code"] == 3
    # only pipeline/io.py reads or writes the document; others may only ask whether it exists
    hand_built = [
        str(p.relative_to(REPO))
        for p in _product_files()
        if p.name != "io.py"
        and re.search(
            r"(write_json|read_json\w*|json\.loads?)\([^)]*(FAILURE_JSON|failure\.json)", p.read_text("utf-8")
        )
    ]
    assert hand_built == []
    assert io.read_failure(tmp_path / "nothing") is None


def test_every_stage_is_one_package_declaring_at_most_twelve_artifacts():
    """summarize once wrote 34 (operators, evidence, model, hardware): each stage has one job, in one
    folder. model keeps 13 and its 3 --model-config tables (docs/architecture.md says why)."""
    stages_dir = Path(sys.modules[STAGES[0].map_rank.__module__].__file__).parents[1]
    for declared in STAGES:
        package = stages_dir / declared.name
        assert (package / "__init__.py").is_file() and (package / "stage.py").is_file(), declared.name
        code = declared.map_rank or declared.reduce_root
        assert code.__module__ == f"npuprof.pipeline.stages.{declared.name}.stage", code.__module__
    counts = {s.name: len(s.produces) + len(s.optional) for s in STAGES}
    assert max(n for name, n in counts.items() if name != "model") <= 12 and counts["model"] <= 16, counts


def test_the_pipeline_order_is_answered_in_one_place():
    stages = resolve_stage_range(StageRange())
    order = ["normalize", "segment", "classify", "summarize", "evidence", "model"]
    order += ["cross_rank", "diagnostics", "report"]
    assert [s.name for s in stages] == list(STAGE_NAMES) == order
    assert all(s.map_rank is not None or s.reduce_root is not None for s in STAGES)
    assert all(stage(name).headline is not None for name in order[1:])


def test_rules_named_by_segmentation_are_declared_categories_and_roles():
    conventions = knowledge.load("semantic_conventions")
    rules = knowledge.load("segmentation_rules")
    categories = set(rules["pass_marker_categories"]) | set(rules["fallback_anchors"]["categories"])
    categories |= set(rules["companion_only"]) | {c for f in rules["attention_families"] for c in f["anchors"]}
    assert categories <= set(conventions["categories"]), categories - set(conventions["categories"])
    roles = set(rules["feature_roles"]) | set(rules["opening_roles"])
    roles |= set(rules["step_terminators"]["inference_roles"]) | set(rules["step_terminators"]["training_roles"])
    assert roles <= set(conventions["roles"]), roles - set(conventions["roles"])


def test_every_anomaly_tag_has_its_wording():
    for tag, rule in knowledge.load("diagnosis_rules")["anomaly_tags"].items():
        assert rule.get("text"), tag


def test_sweep_finds_a_root_that_holds_only_op_summary_csvs(tmp_path):
    rank = tmp_path / "search" / "msprof_case" / "rank_0" / "PROF_000001" / "mindstudio_profiler_output"
    rank.mkdir(parents=True)
    (rank / "op_summary_0_1.csv").write_text("Op Name,OP Type\n")
    flat = tmp_path / "search" / "flat_case"
    flat.mkdir()
    (flat / "op_summary_1.csv").write_text("Op Name,OP Type\n")
    found = [str(p.relative_to(tmp_path / "search")) for p in find_roots([tmp_path / "search"])]
    assert found == ["flat_case", "msprof_case"]


def test_worker_passes_celery_options_through_without_a_separator():
    parser = build_parser()
    options = "-Q storage.lustre -n a@%h -l DEBUG --autoscale 4,1 --max-tasks-per-child 5".split()
    args, extra = parser.parse_known_args(["worker", *options])
    command = worker_command(args.queues, args.concurrency, extra)
    assert command[command.index("worker") + 1 :] == options
    args, extra = parser.parse_known_args(["worker"])
    assert worker_command(args.queues, args.concurrency, extra)[-2:] == ["--loglevel", "INFO"]


@pytest.mark.parametrize(
    "command", [["status", "abc"], ["submit", "--search-root", ".", "-o", "x"], ["worker"], ["flower"]]
)
def test_service_commands_without_the_service_extra_say_how_to_install_it(command):
    block = "import sys; sys.modules['redis'] = None; sys.modules['celery'] = None; sys.modules['flower'] = None\n"
    code = block + f"from npuprof.api.cli import main; sys.exit(main({command!r}))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == EXIT_SERVICE_UNAVAILABLE, run.stderr
    assert run.stderr.count("\n") == 1 and "pip install 'npuprof[service]'" in run.stderr
    assert "Traceback" not in run.stderr


def _long_options(command: str) -> set[str]:
    commands = next(a for a in build_parser()._actions if a.dest == "command")
    return {o for action in commands.choices[command]._actions for o in action.option_strings if o.startswith("--")}


def test_sweep_and_submit_accept_every_analyze_option():
    analysis_options = _long_options("analyze") - {
        "--output",
        "--from-stage",
        "--to-stage",
        "--only-stage",
        "--progress",
        "--json",
        "--jobs",
        "--overwrite",
        "--help",
    }
    assert "--model-config" in analysis_options and "--no-host-trace" in analysis_options
    for command in ("sweep", "submit"):
        assert analysis_options <= _long_options(command), (command, analysis_options - _long_options(command))


def _heavy_modules_after(code: str, heavy: tuple[str, ...]) -> list[str]:
    """Which of ``heavy`` a fresh interpreter has loaded after running ``code``."""
    probe = f"import json, sys\n{code}\nprint(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))"
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.splitlines()[-1])


def test_every_help_page_is_built_without_pandas_numpy_or_pyarrow():
    # npuprof --help must answer at once: its parsers may import nothing that loads the data stack
    code = "from npuprof.api.cli import build_parser\nbuild_parser()"
    assert _heavy_modules_after(code, ("pandas", "numpy", "pyarrow", "scipy", "celery")) == []


def test_the_service_client_loads_no_data_stack():
    # `npuprof status` runs in watch loops and scripts: answering it needs Redis and Celery only
    code = (
        "from npuprof.api import service\n"
        "from npuprof.api.cli.options import print_json\n"
        "from npuprof.workers import app, merge_watch, records\n"
        "print_json(service.sweep_id_for(['/a'], '/b', service.AnalyzeOptions()))"
    )
    assert _heavy_modules_after(code, ("pandas", "numpy", "pyarrow", "scipy")) == []


def test_a_sweep_worker_analyzes_roots_without_the_merges_statistics():
    # each pool worker of a local sweep imports the sweep module to analyze its roots: ruptures and the
    # scipy it loads (0.7 s) are the merge's trends' alone, imported when the trends run
    code = "import npuprof.pipeline.sweep.local, npuprof.workers.tasks"
    assert _heavy_modules_after(code, ("ruptures", "scipy")) == []


def test_every_analyze_option_changes_what_is_computed():
    options = _long_options("analyze")
    # each option is an AnalyzeOptions field, a stage range, or how the run is driven
    fields = {f"--{k.replace('_', '-')}" for k in AnalyzeOptions._KEYS} | {
        "--no-host-trace",
        "--html-single-file",
        "--no-cann-hardware-scan",
    }
    driven = {"--output", "--from-stage", "--to-stage", "--only-stage", "--progress", "--jobs", "--overwrite", "--help"}
    driven |= {"--json"}  # how the result is printed
    assert options <= fields | driven, options - fields - driven


def test_anomaly_tags_carry_their_wording_from_the_rules(tmp_path):
    root = generate(tmp_path / "root", "host_bubble", seed=5)["root"]
    from npuprof.pipeline.runner import analyze

    analyze(root, tmp_path / "out", jobs=1)
    steps = pd.read_csv(tmp_path / "out" / schema.STEP_SUMMARY.file).merge(
        pd.read_csv(tmp_path / "out" / schema.STEP_ANOMALIES_CSV.file), on=["rank_id", "step_ordinal", "step_id"]
    )
    tagged = steps[steps["anomaly_tags"].fillna("").str.contains("INTERNAL_BUBBLE_HEAVY")]
    assert len(tagged)
    for _, row in tagged.iterrows():
        assert f"a {row['largest_internal_bubble_ms']:.2f} ms idle gap inside the step" in row["anomaly_text"]
    untagged = steps[steps["anomaly_tags"].fillna("") == ""]
    assert untagged["anomaly_text"].fillna("").eq("").all()
    assert os.path.exists(tmp_path / "out" / schema.CLASS_SIGNATURES)


def test_every_python_package_is_in_the_wheel():
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    declared = set(config["package-dir"].values())
    packages = {
        str(p.parent.relative_to(REPO))
        for d in ("pipeline", "workers", "api", "knowledge", "synth", "deploy")
        for p in (REPO / d).rglob("__init__.py")
    }
    assert packages <= declared, packages - declared
    assert set(config["packages"]) == set(config["package-dir"])
