"""Sweeps over many profiling roots: discovery, per-root runs and the merged rollup.

The local sweep (process pool) and the Celery service call the same functions here; the archive
directory is the source of truth for which roots are done.
"""
