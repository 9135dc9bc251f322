"""The sweep supervisor's rules: when a root's reduce is sent again, when a root is failed by the
service, and the lock that makes a reduce sent twice do the work once."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest

from npuprof.pipeline.errors import EXIT_NO_SPACE, NoSpace
from npuprof.workers import recovery

RANKS = [0, 1]


def _work_dir(tmp_path, markers: list[int], age_s: float = 0.0):
    work = tmp_path / ".root.work-abc"
    (work / recovery.MARKERS).mkdir(parents=True)
    for rank_id in markers:
        path = recovery.marker_path(work, rank_id)
        path.write_text("{}")
        stamp = time.time() - age_s
        os.utime(path, (stamp, stamp))
    return work


def _action(work, reduce_state="PENDING", reduce_error=None, failed=(), recover_after=60.0):
    return recovery.next_action(
        work, RANKS, reduce_state, reduce_error, lambda: list(failed), recover_after=recover_after, now=time.time()
    )[0]


def test_a_reduce_is_resent_only_when_every_rank_finished_long_enough_ago(tmp_path):
    assert _action(_work_dir(tmp_path / "fresh", RANKS, age_s=5)) == "wait"  # the callback is on its way
    stale = _work_dir(tmp_path / "stale", RANKS, age_s=120)
    assert _action(stale) == "resend_reduce"
    assert _action(stale, reduce_state="FAILURE", reduce_error="ChordError('Callback error: ConnectionError()')") == (
        "resend_reduce"
    )
    for running in recovery.RUNNING_STATES:  # a reduce at work (or waiting for a rank) is left alone
        assert _action(stale, reduce_state=running) == "wait"
    assert _action(_work_dir(tmp_path / "partial", [0], age_s=120)) == "wait"  # rank 1 still runs


def test_a_root_is_failed_when_a_task_of_it_failed_in_the_service(tmp_path):
    partial = _work_dir(tmp_path / "partial", [0], age_s=120)
    assert _action(partial, failed=[("npuprof-rank-abc-1", OSError("stale file handle"))]) == "fail"
    stale = _work_dir(tmp_path / "stale", RANKS, age_s=120)
    action, failure = recovery.next_action(
        stale, RANKS, "FAILURE", "MemoryError()", lambda: [], recover_after=60, now=time.time()
    )
    assert action == "fail" and "MemoryError" in failure["error"]  # the reduce itself broke: resending would loop
    assert failure["kind"] == "service_error" and failure["phase"] == "service"


def test_a_rank_that_found_the_archive_full_fails_its_root_as_no_space(tmp_path):
    partial = _work_dir(tmp_path, [0], age_s=1)
    full = NoSpace("no space left on device writing /archive")
    action, failure = recovery.next_action(
        partial, RANKS, "PENDING", None, lambda: [("npuprof-rank-abc-1", full)], recover_after=60, now=time.time()
    )
    assert action == "fail"
    assert failure == {
        "phase": "service",
        "kind": "no_space",
        "error": "no space left on device writing /archive",
        "exit_code": EXIT_NO_SPACE,
    }


def test_a_root_already_in_the_archive_needs_nothing(tmp_path):
    assert _action(tmp_path / "gone", failed=[("x", OSError())]) == "wait"


def _reduce_once(work: str, log: str, hold_s: float) -> None:
    """What reduce_root does under the lock: the first holder moves the work dir; later ones find it gone."""
    from pathlib import Path

    work_dir = Path(work)
    with recovery.root_lock(work_dir) as present:
        with open(log, "a") as out:
            out.write(f"{'reduced' if present else 'nothing'}\n")
        if present:
            time.sleep(hold_s)
            work_dir.rename(work_dir.with_name("root"))


@pytest.mark.parametrize("copies", [2, 4])
def test_a_reduce_sent_several_times_does_the_work_once(tmp_path, copies):
    work = _work_dir(tmp_path, RANKS)
    log = tmp_path / "log.txt"
    context = multiprocessing.get_context("fork")
    processes = [context.Process(target=_reduce_once, args=(str(work), str(log), 0.3)) for _ in range(copies)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(20)
    assert all(p.exitcode == 0 for p in processes)
    assert sorted(log.read_text().split()) == ["nothing"] * (copies - 1) + ["reduced"]
    assert (tmp_path / "root").is_dir() and not work.exists()
    assert not list(tmp_path.glob("*.lock")), "the lock file goes with its last holder"


def test_a_lock_whose_holder_died_is_free(tmp_path):
    work = _work_dir(tmp_path, RANKS)
    context = multiprocessing.get_context("fork")
    holder = context.Process(target=_die_holding, args=(str(work),))
    holder.start()
    holder.join(20)
    assert holder.exitcode == -9 and list(tmp_path.glob("*.lock"))  # killed: its file stays, its lock does not
    with recovery.root_lock(work) as present:
        assert present
    assert not list(tmp_path.glob("*.lock"))


def _die_holding(work: str) -> None:
    from pathlib import Path

    with recovery.root_lock(Path(work)):
        os.kill(os.getpid(), 9)


def test_a_link_planted_at_a_roots_work_dir_is_replaced_not_followed(tmp_path):
    """The service's work dir is ``.<slug>.work-<key>`` beside the root's output (the key derives from
    the root): a link planted there is removed and the dir made anew, so nothing lands in its target."""
    victim = tmp_path / "victim"
    victim.mkdir()
    work, final = tmp_path / ".root_a.work-abc", tmp_path / "root_a"
    work.symlink_to(victim)
    recovery.mark_work_dir(work, final, "abc")
    assert list(victim.iterdir()) == []
    assert not work.is_symlink() and (work / recovery.MARKERS / recovery.WORK_MARKER).is_file()
    recovery.check_work_dir(work, final)  # the plan's own dir: accepted
