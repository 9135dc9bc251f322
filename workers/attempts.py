"""How often each rank task of a root has started and ended, kept beside its marker in the archive
(shared by every worker): a start without an end is a worker process that died under the task.
A rank whose worker died more than ``max_rank_retries`` times is given up — its root fails with a
named error instead of crash-looping workers and stalling the sweep."""

from __future__ import annotations

import os
from pathlib import Path

from npuprof.pipeline import io
from npuprof.pipeline.errors import StageFailed, WorkerLost


def _size_text(size: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def _input_bytes(rank: dict) -> int:
    paths = [rank.get("kernel_csv"), *rank.get("op_summary_csvs", []), *rank.get("profiler_dbs", [])]
    return sum(os.path.getsize(p) for p in paths if p and os.path.exists(p))


class RankAttempts:
    """The attempts file of one rank: ``{"started": n, "ended": m, "stage": ..., "worker": ...}``."""

    def __init__(self, path: Path, rank: dict) -> None:
        self.path, self.rank = path, rank
        self.state = io.read_json_or_empty(path)

    @property
    def deaths(self) -> int:
        return int(self.state.get("started", 0)) - int(self.state.get("ended", 0))

    def given_up(self, retries: int) -> StageFailed | None:
        """The failure of a rank whose worker died more than ``retries`` times, else None."""
        if self.deaths <= retries:
            return None
        where = f"stage {self.state.get('stage') or 'start'} on {self.state.get('worker') or 'a worker'}"
        message = (
            f"worker process died {self.deaths} times on rank {self.rank['rank_id']} ({self.rank['rank_dir']}) "
            f"(last seen: {where}; the rank's input is {_size_text(_input_bytes(self.rank))}); not retried again"
        )
        return StageFailed(f"{self.state.get('stage') or 'analyze'} (rank {self.rank['rank_id']})", WorkerLost(message))

    def start(self, worker: str) -> None:
        self._write(started=int(self.state.get("started", 0)) + 1, worker=worker, stage=None)

    def at_stage(self, stage: str) -> None:
        if self.state.get("stage") != stage:
            self._write(stage=stage)

    def end(self) -> None:
        self._write(ended=int(self.state.get("ended", 0)) + 1)

    def _write(self, **changes: object) -> None:
        self.state = {**self.state, **changes}
        io.write_json(self.path, self.state)
