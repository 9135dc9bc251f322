"""npuprof analysis library: sources, stages and the runner, as plain functions over tables.

Nothing in this package imports Celery, Redis, paramiko or the CLI (docs/architecture.md).
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("npuprof")
except _metadata.PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
