"""What users touch: the ``npuprof`` CLI and the Python API over analysis outputs."""

from npuprof.api.analysis import Analysis

__all__ = ["Analysis"]
