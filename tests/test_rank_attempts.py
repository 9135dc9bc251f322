"""Poison ranks: the attempts file tells a worker that died under a rank from one that finished or
retried, and gives the rank up, with a named error, after the allowed retries."""

from __future__ import annotations

from npuprof.pipeline.errors import failure_object
from npuprof.workers.attempts import RankAttempts


def _rank(tmp_path) -> dict:
    kernels = tmp_path / "kernel_details.csv"
    kernels.write_bytes(b"x" * 3 * 1024 * 1024)
    return {
        "rank_id": 3,
        "rank_dir": str(tmp_path),
        "kernel_csv": str(kernels),
        "op_summary_csvs": [],
        "profiler_dbs": [],
    }


def test_a_rank_is_given_up_only_after_more_deaths_than_retries(tmp_path):
    path, rank = tmp_path / "rank_3.attempts.json", _rank(tmp_path)
    first = RankAttempts(path, rank)
    first.start("w1@host")
    first.end()  # finished, or a transient error retried it: not a death
    assert RankAttempts(path, rank).deaths == 0
    for worker in ("w1@host", "w2@host"):  # two deliveries whose process died
        attempt = RankAttempts(path, rank)
        assert attempt.given_up(retries=1) is None
        attempt.start(worker)
        attempt.at_stage("segment")
    again = RankAttempts(path, rank)  # another worker reads what the others wrote
    assert again.deaths == 2 and again.given_up(retries=2) is None
    failure = failure_object(again.given_up(retries=1))
    assert failure["kind"] == "worker_lost" and failure["phase"] == "segment (rank 3)"
    assert failure["error"] == (
        f"worker process died 2 times on rank 3 ({tmp_path}) (last seen: stage segment on w2@host; "
        "the rank's input is 3.0 MB); not retried again"
    )
