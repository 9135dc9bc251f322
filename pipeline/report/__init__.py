"""Renderers (markdown, xlsx, html, Perfetto trace): functions from tables to bytes.

A renderer receives the tables it renders and returns the artifact's bytes; it never opens a file.
The report stage returns them in ``StageResult.rendered`` and the runner writes them atomically.
"""
