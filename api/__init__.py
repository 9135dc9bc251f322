"""What users touch: the ``npuprof`` CLI and the Python API over analysis outputs.

``Analysis`` loads on first use, so the CLI's parsers (``npuprof --help``) never import pandas.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from npuprof.api.analysis import Analysis

__all__ = ["Analysis"]


def __getattr__(name: str) -> Any:
    if name == "Analysis":
        from npuprof.api.analysis import Analysis

        return Analysis
    raise AttributeError(f"module 'npuprof.api' has no attribute {name!r}")
