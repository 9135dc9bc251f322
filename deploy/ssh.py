"""One SSH connection to a host: host keys verified, commands as argument lists, files over SFTP.

Host keys come from known_hosts (``~/.ssh/known_hosts`` or ``--known-hosts FILE``); a key that is
not there is refused unless the user says ``--accept-new-host-key`` (then it is recorded there). A
remote command is always an argument list joined with ``shlex.join``: a path with spaces, quotes or
``;`` is one argument and never shell syntax.
"""

from __future__ import annotations

import io
import shlex
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from npuprof.pipeline.errors import RemoteError, UsageError


@dataclass(frozen=True)
class Target:
    """Where to connect: host, user, port, key, and how to treat an unknown host key."""

    host: str
    user: str | None = None
    port: int = 22
    key_file: str | None = None
    known_hosts: str | None = None
    accept_new_host_key: bool = False
    timeout: float = 20.0

    @property
    def label(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.host}{':' + str(self.port) if self.port != 22 else ''}"

    @classmethod
    def parse(cls, text: str, **kw) -> Target:
        """``[user@]host`` or ``ssh://[user@]host[:port]``: the one parser of SSH targets."""
        if text.startswith("ssh://"):
            return cls.from_url(text, **kw)
        user, _, host = text.rpartition("@")
        if not host:
            raise UsageError(f"{text!r}: expected [user@]host or ssh://[user@]host[:port]")
        return cls(host, user or None, **kw)

    @classmethod
    def from_url(cls, url: str, **kw) -> Target:
        """``ssh://[user@]host[:port]`` (the ``--via`` form)."""
        parts = urlsplit(url)
        if parts.scheme != "ssh" or not parts.hostname or parts.path not in ("", "/"):
            raise UsageError(f"--via {url!r}: expected ssh://[user@]host[:port]")
        return cls(parts.hostname, parts.username, parts.port or 22, **kw)


class _RecordNewKey:
    """Accept a host key that known_hosts does not hold, and write it there (``--accept-new-host-key``)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def missing_host_key(self, client, hostname: str, key) -> None:
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        client.save_host_keys(str(self.path))


class Session:
    """An open SSH connection (use as a context manager)."""

    def __init__(self, target: Target) -> None:
        try:
            import paramiko
        except ImportError as exc:
            raise UsageError(f"deploy needs paramiko: pip install 'npuprof[service]' ({exc})") from None
        self.target = target
        self._paramiko = paramiko
        self.client = paramiko.SSHClient()
        known = Path(target.known_hosts).expanduser() if target.known_hosts else Path("~/.ssh/known_hosts").expanduser()
        if known.is_file():
            self.client.load_host_keys(str(known))
        self.client.set_missing_host_key_policy(
            _RecordNewKey(known) if target.accept_new_host_key else paramiko.RejectPolicy()
        )
        self._sftp = None
        self._connect(known)

    def _connect(self, known: Path) -> None:
        paramiko, target = self._paramiko, self.target
        try:
            self.client.connect(
                target.host,
                port=target.port,
                username=target.user,
                key_filename=target.key_file,
                timeout=target.timeout,
                banner_timeout=target.timeout,
                auth_timeout=target.timeout,
                allow_agent=target.key_file is None,
                look_for_keys=target.key_file is None,
            )
        except paramiko.BadHostKeyException:
            raise RemoteError(
                target.label, f"host key does not match {known} (changed, or someone in between): not connecting"
            ) from None
        except paramiko.SSHException as exc:
            if "not found in known_hosts" in str(exc):
                raise RemoteError(
                    target.label,
                    f"host key is not in {known}: verify it and add it there, or pass --accept-new-host-key",
                ) from None
            raise RemoteError(target.label, f"ssh: {exc}") from None
        except OSError as exc:
            raise RemoteError(target.label, f"cannot connect: {exc}") from None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._sftp is not None:
            self._sftp.close()
        self.client.close()

    def run(self, argv: list[str], *, check: bool = True, timeout: float = 600.0) -> tuple[int, str, str]:
        """Run ``argv`` on the host (one quoted word per argument); (exit code, stdout, stderr)."""
        command = shlex.join(str(a) for a in argv)
        try:
            _, stdout, stderr = self.client.exec_command(command, timeout=timeout)
            out, err = stdout.read().decode(errors="replace"), stderr.read().decode(errors="replace")
            code = stdout.channel.recv_exit_status()
        except (self._paramiko.SSHException, OSError) as exc:
            raise RemoteError(self.target.label, f"{argv[0]}: {exc}") from None
        if check and code != 0:
            last = (err.strip() or out.strip()).splitlines()[-1:] or [""]
            raise RemoteError(self.target.label, f"{Path(str(argv[0])).name} exited {code}: {last[0]}")
        return code, out, err

    @property
    def sftp(self):
        if self._sftp is None:
            self._sftp = self.client.open_sftp()
        return self._sftp

    def home(self) -> str:
        return self.sftp.normalize(".")

    def exists(self, path: str) -> bool:
        try:
            self.sftp.stat(path)
            return True
        except OSError:
            return False

    def is_file(self, path: str) -> bool:
        try:
            return stat.S_ISREG(self.sftp.stat(path).st_mode)
        except OSError:
            return False

    def makedirs(self, path: str) -> None:
        """``mkdir -p`` over SFTP (no shell); new dirs 0755 (a signing store others could write would trust
        whatever certificate they add)."""
        current = "/" if path.startswith("/") else ""
        for part in [p for p in path.split("/") if p]:
            current = f"{current}{part}" if current in ("", "/") else f"{current}/{part}"
            if not self.exists(current):
                self.sftp.mkdir(current, mode=0o755)

    def write(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        """Write ``path`` atomically (temp name, chmod, rename) with ``mode`` set before any byte is there."""
        payload = data.encode() if isinstance(data, str) else data
        temp = f"{path}.npuprof-tmp"
        with self.sftp.open(temp, "wb") as handle:
            self.sftp.chmod(temp, mode)
            handle.write(payload)
        self.sftp.posix_rename(temp, path)

    def read(self, path: str) -> bytes:
        buffer = io.BytesIO()
        self.sftp.getfo(path, buffer)
        return buffer.getvalue()
