"""A rank that cannot fit in the memory the machine has is refused up front with a named error (exit 11),
not killed by the kernel mid-stage; the estimate reads the real /proc and cgroup files."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest
from conftest import PYTORCH_DATA, copy_sample, run_cli

from npuprof.pipeline import memory, schema
from npuprof.pipeline.errors import EXIT_NO_MEMORY, NotEnoughMemory
from npuprof.pipeline.sources.discovery import discover
from npuprof.pipeline.sources.profiler_db import DB_TEXT_CAP, repeated_text_bytes
from npuprof.synth import generate


def test_available_memory_is_the_smaller_of_the_machine_and_its_cgroup(tmp_path):
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    proc.mkdir(), cgroup.mkdir()
    (proc / "meminfo").write_text("MemTotal:       24000000 kB\nMemAvailable:    8000000 kB\n")
    assert memory.available_bytes(proc, cgroup) == 8_192_000_000  # no cgroup files: the machine's
    (cgroup / "memory.max").write_text("4000000000\n")
    (cgroup / "memory.current").write_text("1000000000\n")
    assert memory.available_bytes(proc, cgroup) == 3_000_000_000  # the cgroup caps it
    (cgroup / "memory.max").write_text("max\n")
    assert memory.available_bytes(proc, cgroup) == 8_192_000_000  # an uncapped cgroup
    assert memory.available_bytes(tmp_path / "none", tmp_path / "none") is None
    assert memory.available_bytes() > 0  # this machine's own files parse


def test_a_rank_is_refused_when_its_working_set_exceeds_what_is_available(tmp_path, monkeypatch):
    root = generate(tmp_path / "root", "clean", seed=1)["root"]
    rank = max(discover(root).ranks, key=memory.rank_input_bytes)
    need = memory.rank_input_bytes(rank) * memory.WORKING_SET_FACTOR
    memory.check_rank_fits(rank, available=int(need) + 1)  # fits
    with pytest.raises(NotEnoughMemory) as refused:
        memory.check_rank_fits(rank, available=int(need) - 1)
    text = refused.value.one_line()
    assert f"rank {rank.rank_id} needs about" in text
    assert f"MB of kernel sources × {memory.WORKING_SET_FACTOR:g}" in text
    monkeypatch.setenv(memory.FACTOR_ENV, "0")
    memory.check_rank_fits(rank, available=1)  # the check turned off


def test_analyze_refuses_a_rank_too_big_for_the_machine_and_leaves_no_partial_output(tmp_path):
    root = generate(tmp_path / "root", "clean", seed=1)["root"]
    out = tmp_path / "out"
    run = run_cli("analyze", root, "-o", str(out), "--progress", "none", env={memory.FACTOR_ENV: "1e9"})
    assert run.returncode == EXIT_NO_MEMORY
    (line,) = run.stderr.strip().splitlines()
    assert re.search(r"rank \d needs about .* GB of memory .* this machine has .* available", line), line
    failure = json.loads((out / schema.FAILURE_JSON).read_text())
    assert re.fullmatch(r"normalize \(rank \d\)", failure["phase"]) and failure["kind"] == "not_enough_memory"
    assert [p.name for p in out.iterdir()] == [schema.FAILURE_JSON]  # nothing that looks analyzed


def test_fewer_ranks_run_at_once_when_memory_holds_no_more():
    """Eight 1 GB ranks (5 GB each, estimated) with 4 jobs: 22 GB available hold four at once, 12 GB two,
    4 GB still one (a rank that cannot fit alone is check_rank_fits's to refuse)."""
    sizes, factor = [10**9] * 8, memory.WORKING_SET_FACTOR
    assert memory.ranks_at_once(sizes, 4, available=int(22e9)) == 4
    assert memory.ranks_at_once(sizes, 4, available=int(2 * factor * 1e9) + 1) == 2
    assert memory.ranks_at_once(sizes, 4, available=int(4e9)) == 1
    # the biggest ranks count first: a 3 GB rank (15 GB) and 0.1 GB ones (0.5 GB each) in 15.6 GB: two
    assert memory.ranks_at_once([10**8, 3 * 10**9, 10**8, 10**8], 4, available=int(15.6e9)) == 2
    assert memory.ranks_at_once([10**8, 3 * 10**9, 10**8, 10**8], 4, available=int(16.6e9)) == 4
    assert memory.ranks_at_once(sizes, 4, available=None) == 4  # nothing says: as many as asked


def test_the_db_strings_a_rank_repeats_count_its_collectives_names_too(tmp_path):
    """A long STRING_IDS value named by every COMMUNICATION_OP row is copied into each row's name as the
    kernels' are: the guard counts it (it counted the kernels' columns only, 0.37 MB of a 3.8 GB peak)."""
    root = copy_sample(PYTORCH_DATA / "db" / "level0", tmp_path / "root")
    db = next(root.rglob("ascend_pytorch_profiler_0.db"))
    before = repeated_text_bytes(db)
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT count(*) FROM COMMUNICATION_OP").fetchone()[0]
        old = con.execute("SELECT sum(length(s.value)) FROM COMMUNICATION_OP o JOIN STRING_IDS s ON s.id = o.opName")
        old_bytes = old.fetchone()[0] or 0
        big = con.execute("SELECT max(id) + 1 FROM STRING_IDS").fetchone()[0]
        con.execute("INSERT INTO STRING_IDS (id, value) VALUES (?, ?)", (big, "x" * (DB_TEXT_CAP - 1)))
        con.execute("UPDATE COMMUNICATION_OP SET opName = ?", (big,))
    assert rows > 0
    assert repeated_text_bytes(db) - before == rows * (DB_TEXT_CAP - 1) - old_bytes


def test_the_guards_estimate_bounds_what_repeated_db_strings_really_take(tmp_path):
    """One 8,191-character STRING_IDS value named by 7 text columns of every kernel: a 1.3 MB db whose
    4,675 kernels make 268 MB of text, copied per row as the reader materialises it. Measured here, the
    analysis' peak stays under the guard's estimate for the rank (its sources and those strings, × the
    working-set factor) — at 39 k kernels the issue measured a 4.76 GB peak, which the estimate (11 GB)
    bounds the same way — and with less memory available than the estimate the rank is refused, naming
    the strings, before anything is read."""
    import subprocess
    import sys

    root = copy_sample(PYTORCH_DATA / "db" / "level0" / "rank0_ascend_pt", tmp_path / "root" / "rank0_ascend_pt")
    db = next(root.rglob("ascend_pytorch_profiler_0.db"))
    columns = ["name", "opType", "inputFormats", "inputDataTypes", "inputShapes", "outputFormats", "outputDataTypes"]
    with sqlite3.connect(db) as con:
        big = con.execute("SELECT max(id) + 1 FROM STRING_IDS").fetchone()[0]
        con.execute("INSERT INTO STRING_IDS (id, value) VALUES (?, ?)", (big, "x" * (DB_TEXT_CAP - 1)))
        con.execute(f"UPDATE COMPUTE_TASK_INFO SET {', '.join(c + ' = ?' for c in columns)}", [big] * 7)
        kernel_columns = [r[1] for r in con.execute("PRAGMA table_info(COMPUTE_TASK_INFO)")]
        task_columns = [r[1] for r in con.execute("PRAGMA table_info(TASK)")]
        for copy in range(1, 25):  # each copy of the kernels its own task ids, 7 ns later
            shift = {"globalTaskId": f"globalTaskId + {copy * 10**9}", "startNs": f"startNs + {7 * copy}"}
            shift["endNs"] = f"endNs + {7 * copy}"
            picked = ", ".join(shift.get(c, c) for c in kernel_columns)
            first = "WHERE globalTaskId < 1e9"  # the kernels as captured
            con.execute(f"INSERT INTO COMPUTE_TASK_INFO SELECT {picked} FROM COMPUTE_TASK_INFO {first}")
            picked = ", ".join(shift.get(c, c) for c in task_columns)
            con.execute(
                f"INSERT INTO TASK SELECT {picked} FROM TASK WHERE globalTaskId IN "
                "(SELECT globalTaskId FROM COMPUTE_TASK_INFO WHERE globalTaskId < 1e9)"
            )
    (rank,) = discover(tmp_path / "root").ranks
    repeated = repeated_text_bytes(db)
    estimate = (memory.rank_input_bytes(rank) + repeated) * memory.WORKING_SET_FACTOR
    assert repeated > 250e6 and db.stat().st_size < 2e6
    measure = (
        "import resource, subprocess, sys; run = subprocess.run(sys.argv[1:], capture_output=True);"
        "print(run.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)"
    )
    analysis = ["npuprof", "analyze", str(tmp_path / "root"), "-o", str(tmp_path / "out"), "--jobs", "1"]
    measured = subprocess.run([sys.executable, "-c", measure, *analysis], capture_output=True, text=True)
    code, peak = measured.stdout.split()
    assert int(code) == 0 and int(peak) < min(estimate, 1e9), (int(peak) / 1e9, estimate / 1e9)
    with pytest.raises(NotEnoughMemory, match="db strings they repeat"):
        memory.check_rank_fits(rank, available=int(estimate) - 1)
