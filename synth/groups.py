"""Parallel groups of a synthetic job and their HCCL group hashes (shared/spec/input-formats.md §2.3)."""
from __future__ import annotations

from dataclasses import dataclass


def double_hash(text: str) -> int:
    """torch_npu's group hash: two 32-bit polynomial hashes (×29, ×131) packed as (h1 << 32) | h2."""
    h1 = h2 = 0
    for char in text:
        h1 = (h1 * 29 + ord(char)) & 0xFFFFFFFF
        h2 = (h2 * 131 + ord(char)) & 0xFFFFFFFF
    return (h1 << 32) | h2


@dataclass(frozen=True)
class GroupLayout:
    """Group name (dp, tp, exp, default_group) → process-group key and member ranks."""

    groups: dict[str, tuple[str, tuple[int, ...]]]

    @classmethod
    def for_world(cls, world: int, names: list[str]) -> "GroupLayout":
        members = tuple(range(world))
        groups = {"default_group": ("group_name_0", members)}
        for index, name in enumerate(names, start=1):
            groups[name] = (f"group_name_{index * 4 + 1}", members)
        return cls(groups)

    def hash_of(self, group: str) -> str:
        return str(double_hash(self.groups[group][0]))

    def ranks_of(self, group: str) -> tuple[int, ...]:
        return self.groups[group][1]

    def local_rank(self, group: str, rank: int) -> int:
        return self.ranks_of(group).index(rank)

    def global_rank(self, group: str, local: int) -> int:
        return self.ranks_of(group)[local]

    def parallel_group_info(self, rank: int) -> dict:
        return {key: {"group_name": name, "group_rank": members.index(rank), "global_ranks": list(members)}
                for name, (key, members) in self.groups.items() if rank in members}
