"""Generator of realistic synthetic profiling roots with planted faults and ground truth.

Stands alone (no pipeline imports): tests, benchmarks and ``npuprof demo`` use it to prove that
the analysis finds what was planted, and stays quiet where nothing was.
"""

from npuprof.synth.generate import generate
from npuprof.synth.scenarios import SCENARIOS, Fault, Scenario, scenario

__all__ = ["generate", "SCENARIOS", "Scenario", "Fault", "scenario"]
