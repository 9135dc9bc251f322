"""The faults whose findings aicore_freq reports (pipeline/stages/diagnostics/detectors/aicore_freq.py):
aicore_freq_throttled."""

from __future__ import annotations

from npuprof.synth.planting import Fault, FaultType, Scenario, register

register(
    FaultType(
        "aicore_freq_throttled",
        ("ranks", "steps", "factor"),
        "the AI Core clock of ``ranks`` at nominal ÷ factor on ``steps``: their compute kernels take factor × as long"
        " for the same cycles",
        also_reported=("slow_rank_suspected",),
    ),
    scenarios=(
        Scenario(
            "throttled_card",
            "dense training, data parallel; rank 1's AI Core clock drops to 1,200 MHz (nominal 1,800) in steps "
            "11-13 (ordinals 1-3), so its kernels run 1.5x longer and the others wait for it",
            faults=(Fault("aicore_freq_throttled", ranks=(1,), steps=(1, 2, 3), factor=1.5),),
        ),
    ),
    twins=("throttled_card",),
)
