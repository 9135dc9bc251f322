"""rdma_retransmission: a collective over RDMA that took one or more RDMA retransmission timeouts longer
than the same op moving as much — a lost packet waits the queue pair's local ACK timeout before it is
sent again.

The timeout is HCCL's: 4.096 µs × 2^HCCL_RDMA_TIMEOUT (the capture's recorded value, else HCCL's
default, ``default_exponent``). An instance whose busiest transport is RDMA and whose transmit exceeds
its comparable median (communication_collective_slow's: same kind, role, op family and size class) by
at least ``timeout_share_min`` of a timeout is one; the excess in whole timeouts is its retries. A slow
collective on the same ranks names it as its likely cause. Priced by the replay with those instances at
their comparable median.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof.pipeline.stages.diagnostics.collective_sizes import SIZE_COLUMNS
from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.detectors.collective_slow import TRANSMIT_READS, against_comparables
from npuprof.pipeline.stages.diagnostics.findings import Finding, evidence_cap, priced, rule
from npuprof.pipeline.stages.diagnostics.registry import detector
from npuprof.pipeline.stages.diagnostics.retiming import scaled_transit

FINDING = "rdma_retransmission"
QP_TIMEOUT_UNIT_US = 4.096  # the InfiniBand local ACK timeout's unit: 4.096 µs × 2^exponent


def timeout_us(rank_env: dict[int, dict[str, str]], ranks: list[int], default_exponent: int) -> tuple[float, str]:
    """One retransmission timeout of ``ranks`` (µs) and where its exponent comes from: the smallest
    HCCL_RDMA_TIMEOUT they record, else HCCL's default."""
    recorded = [rank_env.get(r, {}).get("HCCL_RDMA_TIMEOUT", "") for r in ranks]
    values = [int(v) for v in recorded if str(v).strip().isdigit()]
    if values:
        return QP_TIMEOUT_UNIT_US * 2 ** min(values), f"HCCL_RDMA_TIMEOUT={min(values)} recorded"
    return QP_TIMEOUT_UNIT_US * 2**default_exponent, f"HCCL_RDMA_TIMEOUT unset: HCCL's default {default_exponent}"


@detector(
    finding_types=(FINDING,),
    reads={
        "alignment": TRANSMIT_READS,
        "comm_ops": SIZE_COLUMNS,
        "rank_env": (),
        "step_model": (),
    },
)
def rdma_retransmission(inputs: DiagnosisContext) -> list[Finding]:
    """One finding per role and kind whose RDMA instances ran at least a timeout past their comparables."""
    spec = rule(FINDING)
    frame = inputs.alignment[inputs.alignment["member_count"] >= 2]
    if frame.empty or not len(inputs.comm_ops):
        return []
    per_instance = against_comparables(frame, inputs.comm_ops)
    rdma = per_instance[(per_instance["transport"] == "RDMA") & (per_instance["comparable"] >= spec["min_comparable"])]
    findings = []
    for (kind, role), family in rdma.groupby(["kind", "role"], dropna=False):  # a loop over RDMA op kinds
        members = frame[frame["alignment_id"].isin(family.index)]
        ranks = sorted(int(r) for r in members["rank_id"].unique())
        timeout, source = timeout_us(inputs.rank_env, ranks, spec["default_exponent"])
        excess = family["transmit_us"] - family["median"]
        hit = family[excess >= spec["timeout_share_min"] * timeout]
        if len(hit):
            findings.append(_finding(inputs, frame, hit, kind, role, timeout, source, spec))
    return findings


def _finding(
    inputs: DiagnosisContext,
    frame: pd.DataFrame,
    hit: pd.DataFrame,
    kind: str,
    role: str,
    timeout: float,
    source: str,
    spec: dict,
) -> Finding:
    members = frame[frame["alignment_id"].isin(hit.index)]
    ranks = sorted(int(r) for r in members["rank_id"].unique())
    excess = hit["transmit_us"] - hit["median"]
    retries = np.maximum(np.rint(excess / timeout), 1)
    factors = hit["median"] / hit["transmit_us"]
    return Finding(
        finding_type=FINDING,
        scope="cross_rank",
        rank_ids=ranks,
        evidence_ids=members.set_index("alignment_id").loc[hit.index, "evidence_id"].head(evidence_cap()).tolist(),
        alignment_ids=list(hit.index),
        statistic={
            "name": "transmit beyond comparable median, in retransmission timeouts",
            "value": float((excess / timeout).max()),
            "threshold": spec["timeout_share_min"],
        },
        values={
            "count": len(hit),
            "kind": kind,
            "role": role,
            "ranks": ", ".join(map(str, ranks)),
            "retries": int(retries.sum()),
            "timeout_ms": timeout / 1e3,
            "source": source,
            "worst_ms": float(excess.max() / 1e3),
        },
        limitations=[
            "a retransmission is inferred from the wait's length: the capture does not record the lost packet"
        ],
        **priced(inputs.step_model, scaled_transit(inputs.step_model, factors)),
    )
