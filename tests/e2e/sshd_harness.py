"""A real OpenSSH server on loopback for the deploy tests: throwaway host key, one authorized test key."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from service_harness import free_port, wait_until

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


class SshServer:
    """``sshd -D`` on 127.0.0.1:<free port>, key auth only, as the current user."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.host_key = workdir / "host_ed25519"
        self.client_key = workdir / "client_ed25519"
        self.known_hosts = workdir / "known_hosts"
        self.proc: subprocess.Popen | None = None

    def _keygen(self, path: Path) -> None:
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)

    def start(self) -> SshServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._keygen(self.host_key)
        self._keygen(self.client_key)
        authorized = self.workdir / "authorized_keys"
        authorized.write_text(self.client_key.with_suffix(".pub").read_text())
        authorized.chmod(0o600)
        public = self.host_key.with_suffix(".pub").read_text().split()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {public[0]} {public[1]}\n")
        config = self.workdir / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {self.host_key}",
                    f"AuthorizedKeysFile {authorized}",
                    f"PidFile {self.workdir / 'sshd.pid'}",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PubkeyAuthentication yes",
                    "PermitRootLogin prohibit-password",
                    "StrictModes no",
                    "UsePAM no",
                    "Subsystem sftp internal-sftp",
                    "LogLevel VERBOSE",
                ]
            )
            + "\n"
        )
        Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation dir sshd insists on
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(config)],
            stdout=open(self.workdir / "sshd.log", "ab"),
            stderr=subprocess.STDOUT,
        )
        wait_until(lambda: "Server listening" in (self.workdir / "sshd.log").read_text(), 20, "sshd to listen")
        return self

    @property
    def user(self) -> str:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name

    def ssh_args(self) -> list[str]:
        """The CLI's ssh options for this server."""
        return ["--port", str(self.port), "--key", str(self.client_key), "--known-hosts", str(self.known_hosts)]

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
