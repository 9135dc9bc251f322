"""Communication findings: collectives that transmit slowly, and links with low bandwidth."""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof.pipeline.diagnosis.findings import Finding, rule
from npuprof.pipeline.diagnosis.inputs import DiagnosisInputs


def _transmit_per_instance(frame: pd.DataFrame) -> pd.DataFrame:
    """Per instance: its transmit time (the fastest member's), kind, role and op family (the name
    without its sequence digits: the same op of the same group)."""
    transmit = frame["transit_us"].where(frame["transit_us"].notna(), frame["duration_us"] - frame["late_by_us"])
    per_instance = (
        frame.assign(transmit_us=transmit)
        .groupby("alignment_id")
        .agg(
            transmit_us=("transmit_us", "min"),
            kind=("kind", "first"),
            role=("parallel_role", "first"),
            family=("name", "first"),
        )
    )
    per_instance["family"] = per_instance["family"].str.replace(r"_\d+_\d+$", "", regex=True)
    return per_instance


def collective_slow(inputs: DiagnosisInputs) -> list[Finding]:
    """Instances whose transmit time is far above that of comparable ones (same kind, role, name family).

    Transmit is communication.json's transit where the rank has it, else the duration minus the
    wait for the last member (``late_by_us``): waiting is never mistaken for slow transmission.
    """
    spec = rule("communication_collective_slow")
    frame = inputs.alignment[inputs.alignment["member_count"] >= 2]
    if frame.empty:
        return []
    per_instance = _transmit_per_instance(frame)
    keys = ["kind", "role", "family"]
    sizes = per_instance.groupby(keys, dropna=False)["transmit_us"].transform("size")
    median = per_instance.groupby(keys, dropna=False)["transmit_us"].transform("median")
    per_instance["median"] = median
    per_instance["ratio"] = per_instance["transmit_us"] / median.where(median > 0)
    slow = per_instance[
        (sizes >= spec["min_comparable"])
        & (per_instance["ratio"] >= spec["transit_ratio_min"])
        & (per_instance["transmit_us"] - median >= spec["excess_us_min"])
    ]
    findings = []
    for (kind, role, _), group in slow.groupby(keys, dropna=False):  # a loop over op families
        ids = group.sort_values("ratio", ascending=False).index
        members = frame[frame["alignment_id"].isin(ids)]
        findings.append(
            Finding(
                "communication_collective_slow",
                "cross_rank",
                sorted(members["rank_id"].unique().tolist()),
                members.set_index("alignment_id").loc[ids[:4], "evidence_id"].tolist(),
                {
                    "name": "transmit_over_comparable_median",
                    "value": float(group["ratio"].max()),
                    "threshold": spec["transit_ratio_min"],
                },
                {
                    "count": len(group),
                    "kind": kind,
                    "role": role,
                    "ratio": float(group["ratio"].max()),
                    "median_us": float(group["median"].iloc[0]),
                    "worst_us": float(group["transmit_us"].max()),
                    "ranks": ", ".join(map(str, sorted(members["rank_id"].unique()))),
                },
                alignment_ids=list(ids),
            )
        )
    return findings


def _global(group_ranks: dict[str, list[int]], group_hash: object, local: pd.Series) -> np.ndarray:
    ranks = group_ranks.get(str(group_hash))
    if not ranks:
        return local.to_numpy(np.int64)  # no parallel_group_info: local ranks stand for themselves
    table = np.asarray(ranks, dtype=np.int64)
    return np.where(local < len(table), table[np.minimum(local, len(table) - 1)], local)


def slow_link(inputs: DiagnosisInputs) -> list[Finding]:
    """Links whose bandwidth is far below comparable links (same group, op kind, transport, size)."""
    spec = rule("slow_link_suspected")
    links = inputs.links[
        (inputs.links["tier"] == "total") & (inputs.links["src_local_rank"] != inputs.links["dst_local_rank"])
    ]
    links = links[links["bandwidth_gbps"] > 0]
    if links.empty:
        return []
    keys = ["group_hash", "parallel_role", "op_kind", "transport", "src_local_rank", "dst_local_rank"]
    per_link = (
        links.groupby(keys, dropna=False)
        .agg(
            bandwidth=("bandwidth_gbps", "median"),
            ops=("op_name", "size"),
            size=("size_mb", "median"),
            reporter=("rank_id", "first"),
            op_name=("op_name", "first"),
        )
        .reset_index()
    )
    comparable = ["group_hash", "op_kind", "transport"]
    per_link["median"] = per_link.groupby(comparable, dropna=False)["bandwidth"].transform("median")
    per_link["peers"] = per_link.groupby(comparable, dropna=False)["bandwidth"].transform("size")
    per_link["ratio"] = per_link["bandwidth"] / per_link["median"]
    slow = per_link[(per_link["peers"] >= spec["min_comparable"]) & (per_link["ratio"] <= spec["bandwidth_ratio_max"])]
    findings = []
    for row in slow.itertuples(index=False):  # a loop over slow links
        src, dst = _global(inputs.group_ranks, row.group_hash, pd.Series([row.src_local_rank, row.dst_local_rank]))
        ops = inputs.alignment[(inputs.alignment["rank_id"] == row.reporter)]
        family = str(row.op_name).rsplit("_", 2)[0]
        evidence = ops[ops["name"].str.startswith(family)]["evidence_id"].head(4).tolist()
        findings.append(
            Finding(
                "slow_link_suspected",
                "link",
                [int(src), int(dst)],
                evidence,
                {
                    "name": "bandwidth_over_comparable_median",
                    "value": float(row.ratio),
                    "threshold": spec["bandwidth_ratio_max"],
                },
                {
                    "src": int(src),
                    "dst": int(dst),
                    "transport": row.transport,
                    "role": row.parallel_role,
                    "bandwidth": float(row.bandwidth),
                    "ratio": float(row.ratio),
                    "median": float(row.median),
                    "ops": int(row.ops),
                },
            )
        )
    return findings
