"""Turning machines into workers over SSH (design.md §3 deploy/). Not built yet."""
