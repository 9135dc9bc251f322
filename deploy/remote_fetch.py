"""Fetch a sweep's summary files over SFTP from a host that mounts the archive (``fetch --via``)."""

from __future__ import annotations

import stat
from pathlib import Path

from npuprof.deploy.ssh import Session, Target
from npuprof.pipeline import io
from npuprof.pipeline.errors import BadInput, RemoteError


def _inside(path: str, directory: str) -> bool:
    return path.startswith(directory.rstrip("/") + "/")


def fetch_over_sftp(target: Target, archive: str, paths: list[str], dest: Path) -> list[str]:
    """Copy ``paths`` (relative to ``archive`` on the host) into ``dest``; missing files are skipped.

    Each path is resolved on the host (symlinks followed) and refused unless it stays inside the
    archive's resolved path: a ``..`` or a symlink that leads out is an error, never a read.
    """
    copied = []
    with Session(target) as session:
        try:
            real_archive = session.sftp.normalize(archive)
        except OSError:
            raise RemoteError(target.label, f"the archive {archive} does not exist there") from None
        for relative in paths:
            if relative.startswith("/") or ".." in Path(relative).parts:
                raise BadInput(f"{archive}/{relative}", "refusing to read outside the sweep's archive dir")
            try:
                real = session.sftp.normalize(f"{real_archive}/{relative}")
            except OSError:
                continue  # not written (a fast-mode root has no report.html): nothing to copy
            if not _inside(real, real_archive):
                raise BadInput(f"{archive}/{relative}", "refusing to read outside the sweep's archive dir")
            try:
                if not stat.S_ISREG(session.sftp.stat(real).st_mode):
                    continue
            except OSError:
                continue
            destination = io.unlinked_destination(dest, relative)  # a link already in dest: replaced
            io.write_with(destination, lambda tmp, source=real: session.sftp.get(source, str(tmp)))
            copied.append(str(destination))
    return copied
