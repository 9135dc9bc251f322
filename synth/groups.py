"""Parallel groups of a synthetic job and their HCCL group hashes (shared/spec/input-formats.md §2.3).

Ranks follow Megatron's order: tp varies fastest, then dp, then pp, so
``rank = pp_index * dp * tp + dp_index * tp + tp_index``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from npuprof.pipeline.sources.group_hash import double_hash


@dataclass(frozen=True)
class GroupInstance:
    """One communicator: its kind (dp, tp, pp, exp, default_group), process-group key and members."""

    name: str
    key: str
    members: tuple[int, ...]

    @property
    def hash(self) -> str:
        return str(double_hash(self.key))


@dataclass
class Topology:
    """tp × dp × pp ranks; ``exp`` (expert parallel) spans each pipeline stage's data-parallel ranks."""

    tp: int = 1
    dp: int = 1
    pp: int = 1
    instances: list[GroupInstance] = field(default_factory=list)

    @property
    def world(self) -> int:
        return self.tp * self.dp * self.pp

    def stage_of(self, rank: int) -> int:
        return rank // (self.dp * self.tp)

    def build(self, names: list[str]) -> "Topology":
        """Create the communicators of the kinds in ``names`` (plus default_group), keyed group_name_N."""
        candidates: list[tuple[str, tuple[int, ...]]] = [("default_group", tuple(range(self.world)))]
        for name in names:
            for members in self._members_of_kind(name):
                candidates.append((name, members))
        self.instances = [
            GroupInstance(name, f"group_name_{index * 2 + (1 if index else 0)}", members)
            for index, (name, members) in enumerate(candidates)
        ]
        return self

    def _members_of_kind(self, name: str) -> list[tuple[int, ...]]:
        tp, dp, pp = self.tp, self.dp, self.pp
        rank = lambda p, d, t: p * dp * tp + d * tp + t  # noqa: E731
        if name == "tp":
            return [tuple(rank(p, d, t) for t in range(tp)) for p in range(pp) for d in range(dp)]
        if name in ("dp", "exp"):
            return [tuple(rank(p, d, t) for d in range(dp)) for p in range(pp) for t in range(tp)]
        if name == "pp":
            return [tuple(rank(p, d, t) for p in range(pp)) for d in range(dp) for t in range(tp)]
        raise ValueError(f"unknown group kind {name!r}")

    def instance(self, name: str, rank: int) -> GroupInstance:
        """The communicator of kind ``name`` that ``rank`` belongs to."""
        for inst in self.instances:
            if inst.name == name and rank in inst.members:
                return inst
        raise KeyError(f"rank {rank} is in no {name} group")

    def parallel_group_info(self, rank: int) -> dict:
        return {
            inst.key: {
                "group_name": inst.name,
                "group_rank": inst.members.index(rank),
                "global_ranks": list(inst.members),
            }
            for inst in self.instances
            if rank in inst.members
        }
