"""The faults whose findings retransmission reports (pipeline/stages/diagnostics/detectors/retransmission.py):
rdma_retransmission."""

from __future__ import annotations

from npuprof.synth.planting import RDMA_TIMEOUT_US, Fault, FaultType, Scenario, register

register(
    FaultType(
        "rdma_retransmission",
        ("ranks", "steps", "gap_us"),
        "the first op over RDMA — a group of ``rdma_groups``, of ``ranks`` — in each of ``steps`` loses a packet and "
        "waits ``gap_us``, one RDMA retransmission timeout, before it ends; the capture records the HCCL_RDMA_TIMEOUT"
        " that makes it that long",
        also_reported=("communication_collective_slow",),
    ),
    scenarios=(
        Scenario(
            "rdma_retransmission",
            "pipeline_balanced with its two stages on two machines (the pipeline's send / recv over RDMA, "
            "HCCL_RDMA_TIMEOUT=14 recorded): step 11's first send / recv between ranks 1 and 3 loses a packet "
            "and waits one retransmission timeout, 67.1 ms",
            pp=2,
            layers=6,
            micro_batches=8,
            rdma_groups=("pp",),
            faults=(Fault("rdma_retransmission", ranks=(1, 3), steps=(1,), gap_us=RDMA_TIMEOUT_US),),
        ),
    ),
    twins=(
        # the twin's send / recv deliver every packet the first time
        "rdma_retransmission",
    ),
)
