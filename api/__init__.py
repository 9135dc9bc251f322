"""What users touch: the ``npuprof`` CLI and the Python API over analysis outputs.

``Analysis`` and ``Sweep`` load on first use, so the CLI's parsers (``npuprof --help``) never import pandas.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from npuprof.api.analysis import Analysis
    from npuprof.api.sweep import Sweep

__all__ = ["Analysis", "Sweep"]


def __getattr__(name: str) -> Any:
    if name == "Analysis":
        from npuprof.api.analysis import Analysis

        return Analysis
    if name == "Sweep":
        from npuprof.api.sweep import Sweep

        return Sweep
    raise AttributeError(f"module 'npuprof.api' has no attribute {name!r}")
