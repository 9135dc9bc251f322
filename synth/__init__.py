"""Generator of realistic synthetic profiling roots with planted faults and ground truth.

Stands alone (no pipeline imports): tests, benchmarks and ``npuprof demo`` use it to prove that
the analysis finds what was planted, and stays quiet where nothing was. ``generate`` loads on first
use, so the scenario list (``npuprof synth --help``) costs no numpy or pyarrow import.
"""

from typing import TYPE_CHECKING, Any

from npuprof.synth.faults import Fault
from npuprof.synth.scenarios import SCENARIOS, Scenario, scenario

if TYPE_CHECKING:
    from npuprof.synth.root_writer import generate

__all__ = ["generate", "SCENARIOS", "Scenario", "Fault", "scenario"]


def __getattr__(name: str) -> Any:
    if name == "generate":
        from npuprof.synth.root_writer import generate

        return generate
    raise AttributeError(f"module 'npuprof.synth' has no attribute {name!r}")
