"""Readers of raw profiling files and discovery of the ranks of a root."""
