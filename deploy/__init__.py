"""Turning machines into workers over SSH (``npuprof deploy``) and fetching over SFTP (docs/architecture.md)."""
