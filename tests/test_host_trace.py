"""The columnar trace_view.json reader returns exactly what the event-by-event (ijson) reader does:
on real traces, on synthetic ones, and on hostile files that must fall back to the event reader."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SAMPLES

from npuprof import knowledge
from npuprof.pipeline.errors import BadInput
from npuprof.pipeline.runner import StageRange, analyze
from npuprof.pipeline.stages.evidence import host_trace, trace_batches, trace_copies
from npuprof.synth import generate

SPANS = [((0.0, 1e20), 200_000), ((0.0, 1e20), 7), ((1_000_100.0, 1_000_400.0), 1_000)]


def reference(path: Path, span: tuple[float, float], cap: int) -> host_trace.HostTrace:
    kept = host_trace._Kept(span[0], span[1], cap)
    with open(path, "rb") as handle:
        host_trace._streamed(path, handle, kept)
        size = handle.tell()
    copies = trace_copies.joined_copies(kept.copies, kept.copy_blocks)
    return host_trace.HostTrace(kept.frame(), kept.dropped, size, kept.launches(), copies)


def assert_same_as_reference(path: Path) -> None:
    for span, cap in SPANS:
        fast, slow = host_trace.read_host_events(path, span[0], span[1], cap), reference(path, span, cap)
        assert fast.events.equals(slow.events), (path.name, span, cap, fast.events.head(), slow.events.head())
        assert (fast.dropped, fast.bytes_read) == (slow.dropped, slow.bytes_read)
        assert fast.launches.equals(slow.launches), (path.name, span)


def read_columnar(path: Path) -> bool:
    """Whether the columnar reader takes the file on its own (no fallback to the event reader)."""
    try:
        host_trace._columnar(path, host_trace._Kept(0.0, 1e20, 200_000))
    except trace_batches.NeedsEventReader:
        return False
    return True


def test_real_traces_read_the_same_both_ways():
    traces = sorted(SAMPLES.rglob("trace_view.json"))
    assert len(traces) >= 5
    for path in traces:
        assert_same_as_reference(path)
    # the torch_npu exports go the columnar way (the point of it), not through the fallback
    assert sum(read_columnar(path) for path in traces) >= 5


def test_a_synthetic_trace_reads_the_same_both_ways(tmp_path):
    root = Path(generate(tmp_path / "root", "host_bubble", seed=3, ranks=1)["root"])
    (path,) = root.rglob("trace_view.json")
    assert_same_as_reference(path)
    assert read_columnar(path)
    assert len(host_trace.read_host_events(path, 0.0, 1e20, 200_000).events) > 100


def _event(name: str, ts: object = "1000100.5", dur: object = 20.0, pid: object = 7, **extra) -> dict:
    return {"ph": "X", "name": name, "pid": pid, "tid": 1, "ts": ts, "dur": dur, "cat": "cpu_op", **extra}


def _flow(phase: str, flow_id: object, ts: str, cat: str = "async_npu") -> dict:
    return {"ph": phase, "name": "launch", "id": flow_id, "pid": 7, "tid": 1, "ts": ts, "cat": cat}


def _launched(flow_id: object, cat: str = "async_npu") -> list[dict]:
    """A host launch (s) and the kernel start (f) it pairs with."""
    return [_flow("s", flow_id, "1000100.5", cat), _flow("f", flow_id, "1000150.5", cat)]


META = [{"ph": "M", "name": "process_name", "pid": 9, "tid": 0, "args": {"name": "Python"}}]
HOSTILE = {
    "separator_in_a_name": [_event('a"},{"ph": "X"'), _event("b},{c")],
    "newline_in_a_name": [_event("line\nbreak"), _event("ok")],
    "nested_objects_in_args": [_event("n", args={"list": [{"a": 1}, {"b": 2}]}), _event("m")],
    "number_timestamps": [_event("n", ts=1000100.5), _event("m", ts=1000200)],
    "text_durations": [_event("n", dur="20.5"), _event("m")],
    "text_pids": [_event("n", pid="host"), _event("m", pid=9)],
    "missing_timestamp": [_event("n", ts=None), _event("m")],
    "an_event_bigger_than_a_parse_block": [_event("big", args={"blob": "x" * (3 << 20)}), _event("m")],
    "categories_in_capitals": [_event("n", cat="CPU_OP"), _event("m", cat=None)],
    "flow_ids_as_numbers_and_text": [*_launched(5), *_launched("77", "HostToDevice"), _event("m")],
    "negative_and_fractional_flow_ids": [*_launched(-5), *_launched(1.5), *_launched(8), _event("m")],
    "id_keys_inside_args": [_event("n", args={"id": "abc"}), _event("m", args={"id": 5}), *_launched(9)],
    # a value whose JSON type the event reader looks at: text digits for a pid, a flow id of another type
    "pids_as_text_digits": [_event("n", pid="7"), _event("m", pid=7)],
    "flow_ids_of_other_types": [*_launched(True), *_launched("0"), *_launched(-0), *_launched({"a": 1}), _event("m")],
    "escapes_in_texts": [
        {"ph": "M", "name": "process_name", "pid": 30, "tid": 0, "args": {"name": 'Py"thon\u00e9'}},
        _event("n\u00e9\\", pid=30),
        *_launched('a"b'),
        _event("m", ts="1000\u0031"),
    ],
    "a_process_named_by_a_number": [
        {"ph": "M", "name": "process_name", "pid": 31, "tid": 0, "args": {"name": 5}},
        _event("n", pid=31, cat=None),
        _event("m"),
    ],
    "sizes_as_text": [
        {"ph": "M", "name": "process_name", "pid": 32, "tid": 0, "args": {"name": "Ascend Hardware"}},
        _event("MEMCPY_ASYNC", pid=32, cat=None, args={"data size(Byte)": "4096", "memcpy direction": "h2d"}),
        _event("hccl", pid=32, cat=None, args={"size(Byte)": "64", "transport type": "SDMA"}),
        _event("m"),
    ],
    # a process is a device lane from the M event that names it so on, until one names it the host's
    "device_lanes_named_in_between": [
        *[_event(f"early{i}", pid=20, cat=None) for i in range(4)],
        {"ph": "M", "name": "process_name", "pid": 20, "tid": 0, "args": {"name": "Ascend Hardware"}},
        *[_event(f"device{i}", pid=20, cat=None) for i in range(6)],
        _event("host_op", pid=20),
        {"ph": "M", "name": "process_labels", "pid": 21, "tid": 0, "args": {"labels": "NPU"}},
        *[_event(f"hccl{i}", pid=21, cat=None) for i in range(3)],
        {"ph": "M", "name": "process_labels", "pid": 20, "tid": 0, "args": {"labels": "CPU"}},
        *[_event(f"late{i}", pid=20, cat=None) for i in range(3)],
        _event("m"),
    ],
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
@pytest.mark.parametrize("separator", [",", ",\n", ", "])
@pytest.mark.parametrize("compact", [False, True], ids=["spaced", "compact"])
def test_hostile_traces_read_the_same_both_ways(tmp_path, case, separator, compact):
    """Spaced is torch_npu's ``"key": value``; compact JSON writes ``"key":value``."""
    events = [json.dumps(e, separators=(",", ":") if compact else None) for e in META + HOSTILE[case]]
    path = tmp_path / "trace_view.json"
    path.write_text("[" + separator.join(events) + "]\n")
    assert_same_as_reference(path)


def test_batches_cut_small_read_the_same_both_ways(tmp_path, monkeypatch):
    """Batches of a few rows: an M event's effect and the cap carried from one batch to the next, on a
    real trace and on a trace with every hostile case."""
    monkeypatch.setattr(trace_batches, "BATCH_ROWS", 3)
    real = min(SAMPLES.rglob("trace_view.json"), key=lambda path: path.stat().st_size)
    assert_same_as_reference(real)
    events = [json.dumps(e) for e in META + [_event(f"k{i}") for i in range(40)]]
    for case in sorted(HOSTILE):
        events += [json.dumps(e) for e in HOSTILE[case]] + [json.dumps(_event(f"{case}{i}")) for i in range(20)]
    separators = [", ", ",\n", ",", " , "]
    path = tmp_path / "trace_view.json"
    path.write_text("[" + "".join(e + separators[i % 4] for i, e in enumerate(events[:-1])) + events[-1] + "]")
    assert_same_as_reference(path)


def test_a_flow_id_past_int64_pairs_by_its_digits(tmp_path):
    """The event reader's parser stops at an integer past 64 bits; the columnar reader keeps its digits."""
    late = [_flow("s", 2**64 + 1, "1000100.5"), _flow("f", 2**64 + 1, "1000170.5")]
    events = [json.dumps(e) for e in META + late + _launched(6) + [_event("m")]]
    path = tmp_path / "trace_view.json"
    path.write_text("[" + ", ".join(events) + "]")
    launches = host_trace.read_host_events(path, 0.0, 1e20, 1_000).launches
    assert launches.to_dict("list") == {"device_start_us": [1000150.5, 1000170.5], "launch_us": [1000100.5] * 2}


def test_mixed_separators_and_the_object_layout_read_the_same_both_ways(tmp_path):
    events = [json.dumps(e) for e in META + [_event("a"), _event("b"), _event("c")]]
    mixed = tmp_path / "mixed.json"
    mixed.write_text("[" + events[0] + ",\n" + events[1] + "," + events[2] + ", " + events[3] + "]")
    assert_same_as_reference(mixed)
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text('{"traceEvents": [' + ",".join(events) + '], "otherData": {"x": [{"ph": "X"}]}}')
    assert_same_as_reference(wrapped)


def test_a_truncated_trace_is_broken_json_with_its_byte(tmp_path):
    events = [json.dumps(e) for e in META + [_event(f"k{i}") for i in range(50)]]
    path = tmp_path / "trace_view.json"
    path.write_text(("[" + ",".join(events) + "]")[:-40])
    with pytest.raises(BadInput, match="broken JSON near byte"):
        host_trace.read_host_events(path, 0.0, 1e20, 1_000)


def test_device_lanes_never_count_at_the_cap(tmp_path):
    """A trace whose device lanes (named by its M events) hold more events than the cap still yields
    every host event: the cap is on host events (it counted every lane's before)."""
    lanes = [
        {"ph": "M", "name": "process_name", "pid": 9, "tid": 0, "args": {"name": "Python"}},
        {"ph": "M", "name": "process_name", "pid": 20, "tid": 0, "args": {"name": "Ascend Hardware"}},
        {"ph": "M", "name": "process_labels", "pid": 20, "tid": 0, "args": {"labels": "NPU"}},
        {"ph": "M", "name": "process_name", "pid": 30, "tid": 0, "args": {"name": "CANN"}},
    ]
    device = [_event(f"kernel{i}", pid=20, cat=None) for i in range(50)]
    host = [_event(f"aten::op{i}", pid=9) for i in range(6)] + [
        _event(f"aclnnOp{i}", pid=30, cat=None) for i in range(4)
    ]
    path = tmp_path / "trace_view.json"
    path.write_text("[" + ", ".join(json.dumps(e) for e in lanes + device + host) + "]")
    for reader in (lambda: host_trace.read_host_events(path, 0.0, 1e20, 20), lambda: reference(path, (0.0, 1e20), 20)):
        trace = reader()
        assert sorted(trace.events["name"]) == sorted(e["name"] for e in host)
        assert trace.dropped == 0
    capped = host_trace.read_host_events(path, 0.0, 1e20, 7)
    assert (len(capped.events), capped.dropped) == (7, 3)  # past the cap: host events, counted
    assert_same_as_reference(path)


def test_a_rank_past_the_cap_says_its_host_causes_are_incomplete(tmp_path, monkeypatch):
    """The events past the cap are counted in the manifest and named as a limitation of the analysis."""
    root = Path(generate(tmp_path / "root", "host_bubble", seed=3, ranks=1)["root"])
    rules = knowledge.load("evidence_rules")
    small = {**rules, "host_trace": {**rules["host_trace"], "max_events_per_rank": 40}}
    load = knowledge.load
    monkeypatch.setattr(knowledge, "load", lambda name: small if name == "evidence_rules" else load(name))
    analyze(root, tmp_path / "out", jobs=1, stage_range=StageRange(to_stage="evidence"))
    manifest = json.loads((tmp_path / "out" / "evidence_manifest.json").read_text())
    status = manifest["host_trace"]["by_rank"]["0"]
    (path,) = root.rglob("trace_view.json")
    span_all = reference(path, (0.0, 1e20), 10**9)
    assert status["host_events"] == 40 and status["dropped_at_cap"] > 0
    assert status["host_events"] + status["dropped_at_cap"] <= len(span_all.events)  # host events only
    (said,) = [text for text in manifest["limitations"] if "max_events_per_rank" in text]
    assert f"{status['dropped_at_cap']} past it" in said and "ranks [0]" in said


def test_an_event_past_duckdbs_buffer_is_left_to_the_event_reader(tmp_path):
    """DuckDB reads an event up to its buffer (32 MB, whatever a smaller object limit says) and refuses a
    longer one: the columnar reader then hands the file to the event reader, which every other fallback
    case here checks (reading 33 MB through it here would take a minute)."""
    path = tmp_path / "trace_view.json"
    blob = "x" * (33 << 20)
    path.write_text(json.dumps([*META, _event("big", args={"blob": blob}), _event("m")]))
    assert not read_columnar(path)


def test_the_trace_reader_prints_nothing_of_its_own():
    """DuckDB draws a progress bar on stdout past 2 s of a query where it takes the session for an
    interactive one (``python -c``, a notebook; not under pytest): a big trace would write it into an
    analysis's output, as it did into a bench's JSON. The reader's connection has the bar off."""
    setting = "SELECT current_setting('enable_progress_bar')"
    reader = "from npuprof.pipeline.stages.evidence.trace_batches import _connection"
    check = f"{reader}; print(_connection().sql({setting!r}).fetchall())"
    run = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[(False,)]", run.stdout


def test_a_trace_under_a_name_that_globs_reads_only_itself(tmp_path):
    """DuckDB takes a file name as a glob pattern: a capture dir named ``rank?`` must not read its
    neighbour ``rankA``'s trace too."""
    own, neighbour = tmp_path / "rank?", tmp_path / "rankA"
    for folder, name in ((own, "own"), (neighbour, "neighbour")):
        folder.mkdir()
        (folder / "trace_view.json").write_text(json.dumps([*META, _event(name, pid=9)]))
    path = own / "trace_view.json"
    assert_same_as_reference(path)
    assert host_trace.read_host_events(path, 0.0, 1e20, 100).events["name"].tolist() == ["own"]
