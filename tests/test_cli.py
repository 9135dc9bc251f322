"""The CLI contract: one JSON object on stdout, one error line on stderr, documented exit codes."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import MSTT, PYTORCH_DATA, QWEN_TRAINING, copy_sample

from npuprof.pipeline import schema
from npuprof.pipeline.errors import EXIT_DEGRADED, MissingPrerequisites
from npuprof.pipeline.stage_range import check_prerequisites
from npuprof.pipeline.stages import stage
from npuprof.synth import SCENARIOS, generate

RANK0 = "rank_0_ascend_pt"


@pytest.fixture
def qwen_copy(tmp_path) -> Path:
    return copy_sample(QWEN_TRAINING, tmp_path / "root")


def kernel_csv(root: Path, rank_dir: str = RANK0) -> Path:
    return root / rank_dir / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"


def assert_clean_failure(run, out: Path, exit_code: int, *must_mention: str) -> dict:
    """The failure contract: exit code, one stderr line naming what and where, failure JSON, no manifest."""
    assert run.returncode == exit_code, (run.returncode, run.stderr)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, run.stderr
    assert "Traceback" not in run.stderr
    for text in must_mention:
        assert text in lines[0], (text, lines[0])
    failure = run.result
    assert failure["status"] == "failed" and failure["phase"] and failure["error"]
    assert not (out / "normalize_manifest.json").exists()
    assert not list(out.rglob("*.parquet")), "a failed stage must not leave partitions behind"
    assert not list(out.rglob("*.tmp"))
    if out.exists():
        assert json.loads((out / "failure.json").read_text())["phase"] == failure["phase"]
    return failure


def test_truncated_csv_fails_with_line(cli, qwen_copy, tmp_path):
    path = kernel_csv(qwen_copy)
    data = path.read_bytes()
    truncated = data[: len(data) - 300]  # cut inside a row near the end
    path.write_bytes(truncated)
    last_line = truncated.count(b"\n") + 1
    out = tmp_path / "out"
    run = cli("analyze", str(qwen_copy), "-o", str(out), "--progress", "none")
    failure = assert_clean_failure(run, out, 3, str(path), "truncated", f"line {last_line}:")
    assert failure["phase"] == "normalize (rank 0)"


@pytest.mark.parametrize("column", ["Name", "Start Time(us)", "Duration(us)"])
def test_missing_required_column_fails_naming_it(cli, qwen_copy, tmp_path, column):
    path = kernel_csv(qwen_copy)
    text = path.read_text(encoding="utf-8")
    header, rest = text.split("\n", 1)
    path.write_text(header.replace(column, "Something Else", 1) + "\n" + rest, encoding="utf-8")
    out = tmp_path / "out"
    run = cli("analyze", str(qwen_copy), "-o", str(out), "--progress", "none")
    assert_clean_failure(run, out, 3, str(path), repr(column), "missing")


def test_non_utf8_byte_fails_with_line(cli, qwen_copy, tmp_path):
    path = kernel_csv(qwen_copy)
    lines = path.read_bytes().split(b"\n")
    lines[10] = lines[10].replace(b"aclnn", b"acl\xffnn", 1)
    path.write_bytes(b"\n".join(lines))
    out = tmp_path / "out"
    run = cli("analyze", str(qwen_copy), "-o", str(out), "--progress", "none")
    assert_clean_failure(run, out, 3, str(path), "line 11", "UTF-8")


def test_bad_number_fails_with_line_and_column(cli, qwen_copy, tmp_path):
    path = kernel_csv(qwen_copy)
    lines = path.read_text(encoding="utf-8").split("\n")
    cells = lines[5].split(",")
    cells[10] = "12abc"  # Duration(us)
    lines[5] = ",".join(cells)
    path.write_text("\n".join(lines), encoding="utf-8")
    out = tmp_path / "out"
    run = cli("analyze", str(qwen_copy), "-o", str(out), "--progress", "none")
    assert_clean_failure(run, out, 3, str(path), "line 6", "'Duration(us)'", "12abc")


def test_empty_file_fails(cli, qwen_copy, tmp_path):
    kernel_csv(qwen_copy).write_bytes(b"")
    out = tmp_path / "out"
    run = cli("analyze", str(qwen_copy), "-o", str(out), "--progress", "none")
    assert_clean_failure(run, out, 3, str(kernel_csv(qwen_copy)), "empty file")


def test_header_only_file_is_an_empty_rank(cli, qwen_copy, tmp_path):
    path = kernel_csv(qwen_copy, "rank_2_ascend_pt")
    path.write_text(path.read_text(encoding="utf-8").split("\n", 1)[0] + "\n", encoding="utf-8")
    out = tmp_path / "out"
    run = cli("analyze", str(qwen_copy), "-o", str(out), "--progress", "none")
    failure = assert_clean_failure(run, out, 3, str(path), "no data rows")
    assert failure["phase"] == "normalize (rank 2)"


def test_db_of_another_schema_fails(cli, tmp_path):
    rank_dir = tmp_path / "root" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    rank_dir.mkdir(parents=True)
    db = rank_dir / "ascend_pytorch_profiler_0.db"
    con = sqlite3.connect(db)
    con.executescript(
        "CREATE TABLE META_DATA (name TEXT, value TEXT); INSERT INTO META_DATA VALUES ('SCHEMA_VERSION', '1.0.0'); "
        "CREATE TABLE EVENTS (x INTEGER);"
    )
    con.commit()
    con.close()
    out = tmp_path / "out"
    run = cli("analyze", str(tmp_path / "root"), "-o", str(out), "--progress", "none")
    assert_clean_failure(run, out, 3, str(db), "not a profiler db")


def test_unsupported_schema_major_fails(cli, tmp_path):
    root = copy_sample(PYTORCH_DATA / "db" / "level1" / "rank0_ascend_pt", tmp_path / "rank0_ascend_pt")
    db = root / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=DELETE")
    con.execute("UPDATE META_DATA SET value = '2.0.0' WHERE name = 'SCHEMA_VERSION'")
    con.commit()
    con.close()
    out = tmp_path / "out"
    run = cli("analyze", str(root), "-o", str(out), "--progress", "none")
    assert_clean_failure(run, out, 3, str(db), "SCHEMA_VERSION 2.0.0")


def test_collection_manifest_not_ok_exits_4(cli, tmp_path):
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"analysis_status": "partial", "profile_root": str(QWEN_TRAINING)}))
    out = tmp_path / "out"
    run = cli("analyze", str(manifest), "-o", str(out), "--progress", "none")
    failure = assert_clean_failure(run, out, 4, str(manifest), "'partial'")
    assert failure["phase"] == "discover"


def test_unreadable_file_fails(cli, qwen_copy, tmp_path):
    path = kernel_csv(qwen_copy)
    path.unlink()
    path.symlink_to(tmp_path / "gone.csv")  # dangling: root can read any mode bits, but not this
    out = tmp_path / "out"
    run = cli("analyze", str(qwen_copy), "-o", str(out), "--progress", "none")
    assert_clean_failure(run, out, 3, str(path), "cannot read file")


def test_a_broken_profiler_info_json_degrades_the_root_naming_its_line(cli, tmp_path):
    root = copy_sample(PYTORCH_DATA / "text" / "level1", tmp_path / "root")
    info = root / "rank1_ascend_pt" / "profiler_info_1.json"
    info.write_text('{\n  "config": {\n    "common_config": [1, 2,\n')
    out = tmp_path / "out"
    run = cli("analyze", str(root), "-o", str(out), "--progress", "none")
    assert run.returncode == EXIT_DEGRADED and "Traceback" not in run.stderr, run.stderr
    assert any("rank 1: profiler_info_1.json is unreadable (line 4: broken JSON" in w for w in run.result["warnings"])
    ranks = json.loads((out / schema.CAPTURE_INFO).read_text())["ranks"]
    assert ranks[1]["profiler_level"] is None and ranks[0]["profiler_level"]  # the other rank keeps its facts


def test_a_bad_rank_removes_the_partitions_of_the_good_ranks(cli, tmp_path):
    root = copy_sample(PYTORCH_DATA / "text" / "level2", tmp_path / "root")
    kernel_csv(root, "rank1_ascend_pt").write_bytes(b"Name,Type\nx,y\n")
    out = tmp_path / "out"
    run = cli("analyze", str(root), "-o", str(out), "--progress", "none", "--jobs", "2")
    assert_clean_failure(run, out, 3, "rank1_ascend_pt", "'Start Time(us)'")


def test_a_nonexistent_root_is_a_usage_error(cli, tmp_path):
    run = cli("analyze", str(tmp_path / "nope"), "-o", str(tmp_path / "out"), "--progress", "none")
    assert run.returncode == 2 and "no such file" in run.result["error"]  # a typo, as a user sees it
    assert not (tmp_path / "out").exists()  # nothing written for a typo


def test_non_empty_output_is_refused_without_overwrite(cli, tmp_path):
    root = str(generate(tmp_path / "root", "clean", steps=3, layers=2, trace=False)["root"])
    out = tmp_path / "out"
    out.mkdir()
    (out / "something.txt").write_text("keep me")
    run = cli("analyze", root, "-o", str(out), "--progress", "none")
    assert run.returncode == 2 and "--overwrite" in run.result["error"]
    run = cli("analyze", root, "-o", str(out), "--progress", "none", "--overwrite")
    assert run.returncode == 2 and "something.txt" in run.result["error"]  # not ours: refused, named
    assert (out / "something.txt").read_text() == "keep me"  # overwrite replaces our artifacts only
    (out / "something.txt").unlink()
    assert cli("analyze", root, "-o", str(out), "--progress", "none").returncode == 0
    run = cli("analyze", root, "-o", str(out), "--progress", "none", "--overwrite")
    assert run.returncode == 0, run.stderr  # an earlier npuprof output is replaced


def test_analyze_runs_every_stage_and_prints_the_conclusions(cli, tmp_path):
    run = cli("analyze", str(QWEN_TRAINING), "-o", str(tmp_path / "out"), "--progress", "none")
    assert run.returncode == 0, run.stderr
    result = run.result
    assert "stages_not_built" not in result and result["stages_executed"][-1] == "report"
    summary = result["analysis_summary"]  # one call gives an agent the conclusions
    assert summary["status"] == result["status"] == "ok" and summary["identity"]["rank_count"] == 4
    assert (tmp_path / "out" / "report" / "report.md").exists()
    assert run.stderr == ""  # a healthy run prints nothing but its JSON (no library warnings)


@pytest.mark.parametrize("planted", ["dummy_rank"])
def test_a_healthy_moe_root_analyzes_without_a_line_on_stderr(cli, tmp_path, planted):
    healthy = replace(SCENARIOS[planted], name=f"healthy_{planted}", faults=())
    root = generate(tmp_path / "root", healthy, steps=3)["root"]
    run = cli("analyze", root, "-o", str(tmp_path / "out"), "--progress", "none")
    assert run.returncode == 0 and run.stderr == "", run.stderr


def test_missing_prerequisites_are_named(cli, tmp_path):
    with pytest.raises(MissingPrerequisites) as raised:
        check_prerequisites(tmp_path, [stage("segment")])
    assert raised.value.exit_code == 5
    assert "normalize_manifest.json" in raised.value.one_line() and "normalized_events" in raised.value.one_line()
    out = tmp_path / "empty"
    out.mkdir()
    run = cli("analyze", "-o", str(out), "--only-stage", "segment", "--progress", "none")
    assert run.returncode == 5 and run.result["kind"] == "missing_prerequisites"
    assert "normalize_manifest.json" in run.result["error"]


def test_from_stage_reruns_segment_on_existing_normalize_output(cli, tmp_path):
    out = tmp_path / "out"
    assert (
        cli("analyze", str(QWEN_TRAINING), "-o", str(out), "--to-stage", "normalize", "--progress", "none").returncode
        == 0
    )
    run = cli("analyze", "-o", str(out), "--from-stage", "segment", "--progress", "none")
    assert run.returncode == 0, run.stderr
    rerun = ["segment", "classify", "summarize", "evidence", "model", "cross_rank", "diagnostics", "report"]
    assert run.result["stages_executed"] == rerun and run.result["rank_count"] == 4
    assert (out / "segment_manifest.json").is_file() and (out / "step_segments").is_dir()


def test_only_stage_reruns_on_an_existing_output(cli, tmp_path):
    out = tmp_path / "out"
    assert cli("analyze", str(QWEN_TRAINING), "-o", str(out), "--progress", "none").returncode == 0
    first = json.loads((out / "manifest.json").read_text())
    run = cli("analyze", str(QWEN_TRAINING), "-o", str(out), "--only-stage", "normalize", "--progress", "none")
    assert run.returncode == 0, run.stderr
    assert run.result["stages_executed"] == ["normalize"]
    assert json.loads((out / "manifest.json").read_text())["created_at"] == first["created_at"]


def test_usage_errors_are_one_json_object_with_exit_2(cli, tmp_path):
    run = cli("analyze", str(QWEN_TRAINING), "-o", str(tmp_path / "o"), "--source", "turbo")
    assert run.returncode == 2 and run.result["status"] == "failed" and run.result["kind"] == "usage_error"
    run = cli()
    assert run.returncode == 2 and run.result["status"] == "failed"


def test_help_documents_commands_flags_and_exit_codes(cli):
    run = cli("analyze", "--help")
    assert run.returncode == 0
    for text in (
        "--from-stage",
        "--to-stage",
        "--only-stage",
        "--source",
        "--progress",
        "--overwrite",
        "--jobs",
        "exit codes",
        "bad input data",
    ):
        assert text in run.stdout
    for command in ("status", "fetch", "cancel", "submit", "worker"):  # every argument explained
        text = " ".join(cli(command, "--help").stdout.split())
        assert "NPUPROF_BROKER_URL" in text, command
        if command in ("status", "fetch", "cancel"):
            assert "the sweep's id" in text, command


def test_json_progress_lines_on_stderr(cli, tmp_path):
    run = cli("analyze", str(QWEN_TRAINING), "-o", str(tmp_path / "out"), "--progress", "json")
    assert run.returncode == 0
    events = [json.loads(line) for line in run.stderr.splitlines()]
    assert {"discover", "normalize"} <= {e["stage"] for e in events}
    # every rank's chain of stages, then each stage's root part
    ranks = [e for e in events if e["stage"] == "ranks"][-1]
    assert ranks["done"] == ranks["total"] == 4
    final = [e for e in events if e["stage"] == "normalize"][-1]
    assert final["done"] == final["total"] == 1 and final["message"] == "root"


def test_manifest_records_version_timings_and_input_facts_with_optional_sha256(cli, tmp_path):
    out = tmp_path / "out"
    run = cli("analyze", str(QWEN_TRAINING), "-o", str(out), "--hash-sources", "--progress", "none")
    assert run.returncode == 0, run.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["npuprof_version"]
    assert manifest["stage_timings"]["normalize"] > 0
    source = str(QWEN_TRAINING / RANK0 / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
    entry = next(i for i in manifest["inputs"] if i["path"] == source)
    assert entry["size"] == os.path.getsize(source)
    assert entry["sha256"] == hashlib.sha256(Path(source).read_bytes()).hexdigest()
    assert not list(out.rglob("*.tmp")) and not list(out.rglob(".*.tmp"))
    # The stage manifest is the completion marker: it is written after the stage's artifacts.
    stage_manifest = (out / "normalize_manifest.json").stat().st_mtime_ns
    assert all(p.stat().st_mtime_ns <= stage_manifest for p in (out / "normalized_events").rglob("*.parquet"))


def test_synth_command_writes_text_and_db_roots_and_refuses_bad_requests(cli, tmp_path):
    run = cli(
        "synth",
        str(tmp_path / "root"),
        "--scenario",
        "slow_rank",
        "--ranks",
        "3",
        "--steps",
        "2",
        "--layers",
        "2",
        "--seed",
        "5",
    )
    assert run.returncode == 0, run.stderr
    result = run.result
    assert result["ranks"] == 3 and result["rows"] > 0
    truth = json.loads((tmp_path / "root" / "ground_truth.json").read_text())
    assert truth["seed"] == 5 and len(truth["ranks"]) == 3
    again = cli("synth", str(tmp_path / "root"), "--scenario", "slow_rank")
    assert again.returncode == 2 and "not empty" in again.result["error"]
    db = cli("synth", str(tmp_path / "db"), "--export", "db", "--steps", "2", "--layers", "2")
    assert db.returncode == 0, db.stderr
    assert len(list((tmp_path / "db").rglob("ascend_pytorch_profiler_*.db"))) == 4
    assert not list((tmp_path / "db").rglob("kernel_details.csv"))
    bad = cli("synth", str(tmp_path / "x"), "--scenario", "slow_rank", "--ranks", "2")
    assert bad.returncode == 2 and "needs rank 2" in bad.result["error"]


def test_demo_generates_and_analyzes_and_says_where_things_are(cli, tmp_path):
    run = cli("demo", "--dir", str(tmp_path / "demo"), "--progress", "none")
    assert run.returncode == 0, run.stderr
    result = run.result
    assert result["status"] == "ok" and result["rank_count"] == 4
    assert Path(result["demo"]["ground_truth"]).is_file()
    assert (Path(result["output_dir"]) / "normalize_manifest.json").is_file()
    # the demo's promise, against its ground truth: every planted fault found, on its ranks, and said so
    truth = json.loads(Path(result["demo"]["ground_truth"]).read_text())
    planted = [(f["type"], sorted(f.get("ranks") or [])) for f in truth["expected_findings"]]
    assert planted[:2] == [("slow_rank_suspected", [2]), ("device_idle_bubble", [0])]  # SCENARIOS["demo"]
    assert result["demo"]["planted_findings"] == [{"type": t, "ranks": r, "found": True} for t, r in planted]
    from npuprof.api.terminal import _demo

    lines = _demo(result)
    told = "; ".join(f"{t} (rank {r[0]})" for t, r in planted)
    assert f"found {len(planted)} of {len(planted)} planted findings: {told}" in lines, lines
    summaries = [g["summary"] for g in result["analysis_summary"]["findings"]]
    assert all(sum(summary in line for line in lines) == 1 for summary in summaries)  # each finding said once
    assert cli("demo", "--dir", str(tmp_path / "demo"), "--progress", "none").returncode == 0  # re-runnable
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "mine.txt").write_text("x")
    assert cli("demo", "--dir", str(foreign)).returncode == 2


def test_progress_bar_is_drawn_on_a_tty_and_stdout_keeps_one_json_object(tmp_path):
    import pty
    import subprocess

    exe = shutil.which("npuprof")
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [exe, "analyze", str(QWEN_TRAINING), "-o", str(tmp_path / "out")],
        stdout=subprocess.PIPE,
        stderr=follower,
        text=True,
    )
    stdout, _ = proc.communicate(timeout=120)
    os.close(follower)
    drawn = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        drawn += chunk
    os.close(leader)
    assert proc.returncode == 0
    assert json.loads(stdout)["status"] == "ok"
    text = drawn.decode()
    assert "\r" in text and "normalize" in text and "[" in text and "4/4" in text


def test_analyze_from_code_read_on_stdin_still_runs(tmp_path):
    """A pool child cannot re-import a __main__ read from stdin: the runner maps in-process instead."""
    import subprocess
    import sys

    code = (
        "from npuprof.pipeline.runner import analyze\n"
        f"print(analyze({str(QWEN_TRAINING)!r}, {str(tmp_path / 'o')!r}, jobs=2)['status'])\n"
    )
    proc = subprocess.run([sys.executable, "-"], input=code, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_two_unrelated_captures_in_one_folder_are_refused_as_not_one_capture(cli, tmp_path):
    # the vendor's advisor test data: a 2023 capture (33 columns) and a 2025 one (46 columns), each
    # one rank with no profiler_info; joined, they made ranks 0 and 1 of a "capture" of 14 months
    advisor = copy_sample(MSTT / "ut" / "advisor", tmp_path / "advisor")
    out = tmp_path / "out"
    run = cli("analyze", str(advisor), "-o", str(out), "--progress", "none")
    failure = assert_clean_failure(run, out, 3, "not one capture", "days before", "different columns (33 on")
    assert failure["phase"] == "normalize" and "come only from the order" in failure["error"]
    swept = cli("sweep", "--search-root", str(advisor), "-o", str(tmp_path / "sweep"), "--progress", "none")
    assert swept.returncode == 0, swept.stderr  # a sweep takes them as the two roots they are
    assert swept.result["root_count"] == 2


def test_a_sweep_over_a_folder_of_unrelated_captures_takes_each_and_not_the_folder(cli, tmp_path):
    """The server's test data: two rank-named captures (test_rank_0, test_rank_1) beside a db capture
    and an op-summary one. The rank dirs are not folded into the folder (it is no one case: analyzed,
    rank 0 appears twice), so the sweep analyzes the four captures and counts no failed root."""
    from conftest import SERVER_DATA

    search = copy_sample(SERVER_DATA, tmp_path / "test_data")
    swept = cli("sweep", "--search-root", str(search), "-o", str(tmp_path / "sweep"), "--progress", "none")
    assert swept.returncode == 0, swept.stdout[-600:]
    assert swept.result["root_count"] == 4 and swept.result["status_counts"] == {"ok": 4}


def _at_a_terminal(command: list[str]) -> tuple[int, str, str]:
    """Run ``command`` with its stdout on a pty (a person's terminal): (exit code, what the terminal
    showed, stderr)."""
    import pty
    import subprocess
    import threading

    leader, follower = pty.openpty()
    proc = subprocess.Popen(command, stdout=follower, stderr=subprocess.PIPE, text=True)
    os.close(follower)
    shown: list[bytes] = []
    reader = threading.Thread(target=lambda: shown.extend(iter(lambda: _read_or_empty(leader), b"")))
    reader.start()  # read while the process writes: a pty buffer is small
    _, stderr = proc.communicate(timeout=300)
    reader.join(timeout=10)
    os.close(leader)
    return proc.returncode, b"".join(shown).decode().replace("\r\n", "\n"), stderr


def test_a_terminal_gets_a_summary_a_person_reads_and_json_only_when_asked(tmp_path):
    out = tmp_path / "out"
    command = [shutil.which("npuprof"), "analyze", str(QWEN_TRAINING), "-o", str(out), "--progress", "none"]
    code, shown, stderr = _at_a_terminal(command)
    assert code == 0, stderr
    assert shown == ""  # no screen of JSON before the lines a person reads
    assert stderr.startswith("npuprof analyze: status: ok — 4 ranks")
    # the step from where the profiler started it: Stage 810.0 + Preparing 0.2 ms (step_trace_time.csv)
    assert "rank 0: of a 810.2 ms step, 313.9 ms (39%) exposed PP send_recv" in stderr
    assert "pp_stage_imbalance" not in stderr and "saves ~" in stderr  # findings in words, with their saving
    assert "\n    try: Use the framework's fused loss: Megatron-core's `--cross-entropy-loss-fusion`" in stderr
    assert f"report: {out / 'report' / 'report.md'}" in stderr
    code, shown, stderr = _at_a_terminal([*command, "--overwrite", "--json"])
    assert code == 0 and json.loads(shown)["status"] == "ok"  # the one JSON object, asked for
    assert stderr.startswith("npuprof analyze: status: ok")
    code, shown, stderr = _at_a_terminal(
        [shutil.which("npuprof"), "analyze", str(tmp_path / "nowhere"), "-o", str(out)]
    )
    assert code == 2 and shown == "" and stderr.startswith("npuprof: error [")  # the failure's one line


def test_escape_codes_in_kernel_names_reach_a_terminal_as_text(tmp_path):
    """A kernel name carrying terminal escape sequences (set the title, clear the screen) is printed in
    the human summary as escapes, never as control characters the terminal would act on; so is a bidi
    override (which shows the rest of a line reversed). report.md, read with cat as often as rendered,
    holds the name with its escapes too."""
    import csv

    from npuprof.synth import generate

    hostile = "\x1b]0;pwned\x07\x1b[2J\u202eMatMulV3"
    root = Path(generate(tmp_path / "root", "launch_bound_rank", seed=7, trace=True)["root"])
    for path in root.rglob("kernel_details.csv"):  # the kernel the late launches wait for most
        with open(path, newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
        name = rows[0].index("Name")
        for row in rows[1:]:
            row[name] = row[name].replace("MatMulV3", hostile)
        with open(path, "w", newline="", encoding="utf-8") as handle:
            csv.writer(handle).writerows(rows)
    command = [shutil.which("npuprof"), "analyze", str(root), "-o", str(tmp_path / "out"), "--progress", "none"]
    code, _, stderr = _at_a_terminal(command)
    assert code == 0, stderr
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\u202eMatMulV3" in stderr  # named, as text
    assert not any(c in stderr for c in ("\x1b", "\x07", "\u202e")), repr(stderr[:500])
    report = (tmp_path / "out" / "report" / "report.md").read_text(encoding="utf-8")
    assert "u202eMatMulV3" in report and not any(c in report for c in ("\x1b", "\x07", "\u202e"))


def _read_or_empty(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:
        return b""


def test_a_failure_at_a_terminal_starts_a_line_of_its_own_after_the_progress_bar(tmp_path):
    """At a terminal the bar is redrawn in place on one line; a failure before the bar's stage finished
    was written onto the end of that line ("discover [---] 0/1 … npuprof: error …"). It starts its own."""
    import pty
    import subprocess

    ranks = tmp_path / "trace_only" / "rank_0" / "ASCEND_PROFILER_OUTPUT"
    ranks.mkdir(parents=True)
    (ranks / "trace_view.json").write_text("[]")
    primary, secondary = pty.openpty()
    exe = shutil.which("npuprof")
    command = [exe, "analyze", str(tmp_path / "trace_only"), "-o", str(tmp_path / "out")]
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=secondary, stderr=secondary)
    os.close(secondary)
    seen = b""
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the terminal closed: the command ended
            break
        if not chunk:
            break
        seen += chunk
    os.close(primary)
    assert proc.wait(60) == 3
    text = seen.decode(errors="replace").replace("\r\n", "\n")
    assert "[" in text.split("npuprof: error")[0]  # the bar was drawn first, at a terminal
    assert "\nnpuprof: error [discover]: " in text, text


def test_the_summary_after_an_unfinished_progress_bar_starts_its_own_line(capsys, monkeypatch):
    """The sweep's merge bar stayed at 0/1 and the summary was written onto its end ("... flee npuprof
    sweep: status: ok"): the summary starts a line of its own, and says one path to open."""
    import sys

    from npuprof.api.terminal import print_result
    from npuprof.pipeline.progress import BarProgress

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    BarProgress(sys.stderr)("merge", 0, 1, "merging 3 roots")
    result = {"status": "ok", "root_count": 3, "rollup": "a/sweep_class_rollup.csv"}
    result["sweep_report"] = "a/sweep_report.html"
    print_result("sweep", result)
    err = capsys.readouterr().err
    assert "merging 3 roots" in err and "\nnpuprof sweep: status: ok" in err, err
    assert "report: a/sweep_report.html (every root's row: a/sweep_class_rollup.csv)" in err
