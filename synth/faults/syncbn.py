"""The faults whose findings syncbn reports (pipeline/stages/diagnostics/detectors/syncbn.py): syncbn."""

from __future__ import annotations

from npuprof.synth.planting import Fault, FaultType, Scenario, register

register(
    FaultType(
        "syncbn",
        (),
        "the scenario's vision encoder stem, ``vision_blocks``, converted with convert_sync_batchnorm: each BatchNorm"
        " gathers its statistics over data parallel in a blocking all-gather inside the host's ``SyncBatchNorm`` op, "
        "and all-reduces its gradient sums in the backward inside ``SyncBatchNormBackward``; plain BatchNorm runs the"
        " same kernels alone",
    ),
    scenarios=(
        Scenario(
            "syncbn_vision",
            "multimodal training: a vision encoder's stem of 4 conv + BatchNorm + ReLU blocks ahead of the decoder, "
            "converted to SyncBatchNorm: every BatchNorm gathers its batch statistics over data parallel in a "
            "blocking all-gather (and all-reduces its gradient sums in the backward), 16 small collectives per step",
            vision_blocks=4,
            faults=(Fault("syncbn"),),
        ),
    ),
    twins=(
        # the twin's vision stem runs plain BatchNorm: the same kernels, no statistics collectives
        "syncbn_vision",
    ),
)
