"""Make a host an npuprof worker: upload the wheel, install it in a venv, run the worker, check it answers.

Everything lives in one install dir on the host (default ``~/.local/share/npuprof-worker``):
``wheels/``, ``venv/``, ``broker_url`` (0600: the broker URL), ``worker.env`` (0600), ``worker.sh``, ``supervise.sh``,
``run/`` (pids), ``log/`` and ``deployed.json`` (what is deployed, without the password). The
worker runs as the connecting user: a systemd user unit where ``systemctl --user`` works, else
``supervise.sh`` under ``setsid``; nothing is ever run with sudo. Deploying what is already
deployed and answering changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import PurePosixPath

from npuprof.deploy.ssh import Session, Target
from npuprof.deploy.wheel import Wheel
from npuprof.pipeline.errors import RemoteError, UsageError
from npuprof.workers.settings import redacted

DEFAULT_INSTALL_DIR = "~/.local/share/npuprof-worker"
DEPLOYED = "deployed.json"


@dataclass(frozen=True)
class WorkerSettings:
    """What the deployed worker is: where it lives, which queues, which broker, how it is run."""

    broker: str
    queues: tuple[str, ...] = ("npuprof",)
    install_dir: str = DEFAULT_INSTALL_DIR
    python: str = "python3"
    concurrency: int | None = None
    storage_map: str | None = None  # NPUPROF_STORAGE_MAP of the worker: which storages this host mounts
    storage_roots: tuple[str, ...] = ()  # NPUPROF_STORAGE_ROOTS: more dirs it serves (an archive)
    signing_dir: str | None = None  # a local dir of npuprof signing-keys: copied to the host, signing on
    system_site_packages: bool = False
    init: str = "auto"  # auto | systemd | supervisor
    ping_timeout: float = 90.0


@dataclass(frozen=True)
class Layout:
    """Absolute paths of one install dir on the host."""

    root: str

    @property
    def worker_name(self) -> str:
        """The Celery worker name (before @host): one per install dir."""
        return f"npuprof-{hashlib.sha1(self.root.encode()).hexdigest()[:10]}"

    @property
    def unit(self) -> str:
        return f"{self.worker_name}.service"

    def path(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    @property
    def venv_python(self) -> str:
        return self.path("venv/bin/python")

    @property
    def deployed(self) -> str:
        return self.path(DEPLOYED)

    @property
    def supervisor_pid(self) -> str:
        return self.path("run/supervisor.pid")

    @property
    def worker_pid(self) -> str:
        return self.path("run/worker.pid")

    @property
    def worker_log(self) -> str:
        return self.path("log/worker.log")


def _template(name: str) -> str:
    return resources.files("npuprof.deploy").joinpath("templates", name).read_text(encoding="utf-8")


def _layout(session: Session, install_dir: str) -> Layout:
    home = session.home()
    if install_dir == "~" or install_dir.startswith("~/"):
        install_dir = home + install_dir[1:]
    if not install_dir.startswith("/"):
        install_dir = f"{home}/{install_dir}"
    return Layout(install_dir.rstrip("/"))


def systemd_quote(word: str) -> str:
    """One word of a systemd ExecStart line (double quotes, C escapes, % and $ doubled)."""
    escaped = word.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def _uses_systemd(session: Session, init: str) -> bool:
    if init != "auto":
        return init == "systemd"
    code, _, _ = session.run(["systemctl", "--user", "show-environment"], check=False, timeout=30)
    return code == 0


def _read_deployed(session: Session, layout: Layout) -> dict:
    if not session.is_file(layout.deployed):
        return {}
    try:
        return json.loads(session.read(layout.deployed))
    except (ValueError, OSError):
        return {}


def _desired(settings: WorkerSettings, wheel: Wheel, layout: Layout, systemd: bool) -> dict:
    return {
        "version": wheel.version,
        "wheel": wheel.path.name,
        "wheel_fingerprint": wheel.fingerprint,
        "broker": redacted(settings.broker),
        # the URL's hash tells a changed password apart without storing it
        "broker_sha256": hashlib.sha256(settings.broker.encode()).hexdigest(),
        "queues": list(settings.queues),
        "storage_map": settings.storage_map,
        "storage_roots": list(settings.storage_roots),
        "signing_sha256": _signing_digest(settings.signing_dir),
        "concurrency": settings.concurrency,
        "python": settings.python,
        "system_site_packages": settings.system_site_packages,
        "init": "systemd" if systemd else "supervisor",
        "worker_name": layout.worker_name,
        "install_dir": layout.root,
    }


def _signing_files(signing_dir: str) -> dict[str, bytes]:
    """Each signing file to copy, by its path relative to the install dir's ``signing/``."""
    from npuprof.workers import signing

    key, cert, store = signing.files_in(signing_dir).values()
    files = {signing.KEY_FILE: key.read_bytes(), signing.CERT_FILE: cert.read_bytes()}
    files.update({f"{signing.STORE_DIR}/{p.name}": p.read_bytes() for p in sorted(store.iterdir()) if p.is_file()})
    return files


def _signing_digest(signing_dir: str | None) -> str | None:
    """A hash of the signing files (a new key or a new trusted certificate redeploys; no key is stored)."""
    if signing_dir is None:
        return None
    digest = hashlib.sha256()
    for name, data in _signing_files(signing_dir).items():
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()


def _env_file(settings: WorkerSettings, worker: str, layout: Layout) -> str:
    from npuprof.workers import signing

    signing_env = dict.fromkeys(signing.SIGNING_ENV, "")
    if settings.signing_dir:
        remote = (signing.KEY_FILE, signing.CERT_FILE, signing.STORE_DIR)
        signing_env = {name: layout.path(f"signing/{file}") for name, file in zip(signing.SIGNING_ENV, remote)}
    values = {
        # the URL stays in its own 0600 file: the worker and the pool children it forks to analyze
        # untrusted captures get its path in their environment, never the password
        "NPUPROF_BROKER_URL_FILE": layout.path("broker_url"),
        "NPUPROF_QUEUES": ",".join(settings.queues),
        "NPUPROF_WORKER_NAME": worker,
        "NPUPROF_CONCURRENCY": str(settings.concurrency or ""),
        "NPUPROF_STORAGE_MAP": settings.storage_map or "",
        "NPUPROF_STORAGE_ROOTS": ":".join(settings.storage_roots),  # the host's os.pathsep: hosts are POSIX
        **signing_env,
    }
    return "".join(f"{k}={shlex.quote(v)}\n" for k, v in values.items())


def _install(session: Session, layout: Layout, settings: WorkerSettings, wheel: Wheel, deployed: dict) -> None:
    """Wheel, venv and package: each step only when what it makes is missing or out of date."""
    for relative in ("wheels", "run", "log"):
        session.makedirs(layout.path(relative))
    remote_wheel = layout.path(f"wheels/{wheel.path.name}")
    new_wheel = deployed.get("wheel_fingerprint") != wheel.fingerprint or not session.is_file(remote_wheel)
    if new_wheel:
        session.write(remote_wheel, wheel.path.read_bytes())
    fresh_venv = not session.is_file(layout.venv_python) or deployed.get("python") != settings.python
    if fresh_venv:
        flags = ["--system-site-packages"] if settings.system_site_packages else []
        session.run([settings.python, "-m", "venv", "--clear", *flags, layout.path("venv")])
    if new_wheel or fresh_venv:
        pip = [layout.venv_python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        # a direct reference: a path with spaces or ';' stays a path (a bare "path[extra]" would parse ';' as a marker)
        uri = PurePosixPath(remote_wheel).as_uri()
        session.run([*pip, f"npuprof[service] @ {uri}"], timeout=1800)  # dependencies, when missing
        session.run([*pip, "--no-deps", "--force-reinstall", f"npuprof @ {uri}"], timeout=600)  # this exact content
    if settings.signing_dir:
        from npuprof.workers.signing import KEY_FILE, STORE_DIR

        session.makedirs(layout.path(f"signing/{STORE_DIR}"))
        for name, data in _signing_files(settings.signing_dir).items():
            session.write(layout.path(f"signing/{name}"), data, mode=0o600 if name == KEY_FILE else 0o644)
    env = _env_file(settings, f"{layout.worker_name}@%h", layout)
    session.write(layout.path("broker_url"), settings.broker + "\n", mode=0o600)
    session.write(layout.path("worker.env"), env, mode=0o600)
    session.write(layout.path("worker.sh"), _template("worker.sh"), mode=0o755)
    session.write(layout.path("supervise.sh"), _template("supervise.sh"), mode=0o755)


def _pid(session: Session, path: str) -> int | None:
    if not session.is_file(path):
        return None
    text = session.read(path).decode(errors="replace").strip()
    if not text.isdigit():
        return None
    code, _, _ = session.run(["kill", "-0", text], check=False, timeout=30)
    return int(text) if code == 0 else None


def _stop(session: Session, layout: Layout, systemd: bool, wait: float = 120.0) -> bool:
    """Stop the worker (and its supervisor); True when one was running."""
    if systemd:
        code, _, _ = session.run(["systemctl", "--user", "stop", layout.unit], check=False, timeout=wait)
        return code == 0
    supervisor = _pid(session, layout.supervisor_pid)
    if supervisor is None:
        return False
    session.run(["kill", "-TERM", str(supervisor)], check=False, timeout=30)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if _pid(session, layout.supervisor_pid) is None and _pid(session, layout.worker_pid) is None:
            return True
        time.sleep(0.5)
    raise RemoteError(session.target.label, f"the worker did not stop within {wait:.0f} s (pid {supervisor})")


def _start(session: Session, layout: Layout, systemd: bool) -> None:
    if systemd:
        unit_dir = f"{session.home()}/.config/systemd/user"
        session.makedirs(unit_dir)
        unit = _template("npuprof-worker.service").format(
            worker_name=layout.worker_name, worker_sh=systemd_quote(layout.path("worker.sh"))
        )
        session.write(f"{unit_dir}/{layout.unit}", unit)
        session.run(["systemctl", "--user", "daemon-reload"], timeout=60)
        session.run(["systemctl", "--user", "enable", "--now", layout.unit], timeout=120)
        return
    session.run(["setsid", "-f", layout.path("supervise.sh")], timeout=60)


def ping(broker: str, worker_name: str, timeout: float) -> float | None:
    """Seconds until the worker answered a Celery ping through the broker, None when it did not."""
    from npuprof.workers.app import make_app

    app = make_app(broker)
    started = time.monotonic()
    try:
        while time.monotonic() - started < timeout:
            replies = app.control.ping(timeout=1.0)
            if any(worker_name in name for reply in replies for name in reply):
                return time.monotonic() - started
            time.sleep(0.5)
    finally:
        app.close()
    return None


def _worker_log_tail(session: Session, layout: Layout) -> str:
    if not session.is_file(layout.worker_log):
        return "no worker log"
    lines = session.read(layout.worker_log).decode(errors="replace").strip().splitlines()
    return redacted(lines[-1]) if lines else "empty worker log"


def deploy(target: Target, settings: WorkerSettings, wheel: Wheel) -> dict:
    """Install ``wheel`` on ``target`` and run a worker for ``settings``; idempotent."""
    if not settings.queues:
        raise UsageError("deploy: at least one --queue")
    with Session(target) as session:
        layout = _layout(session, settings.install_dir)
        systemd = _uses_systemd(session, settings.init)
        deployed = _read_deployed(session, layout)
        desired = _desired(settings, wheel, layout, systemd)
        name = desired["worker_name"]
        reasons = sorted(k.removesuffix("_sha256") for k in desired if deployed.get(k) != desired[k])
        if not reasons:
            if ping(settings.broker, name, min(settings.ping_timeout, 10.0)) is not None:
                return {"host": target.label, "changed": False, "state": "running", **_public(desired)}
            reasons = ["worker not answering"]
        _install(session, layout, settings, wheel, deployed)
        _stop(session, layout, systemd)
        _start(session, layout, systemd)
        answered = ping(settings.broker, name, settings.ping_timeout)
        if answered is None:
            raise RemoteError(
                target.label,
                f"worker {name} did not answer a ping within {settings.ping_timeout:.0f} s: "
                f"{_worker_log_tail(session, layout)}",
            )
        session.write(layout.deployed, json.dumps(desired, indent=2))
        return {
            "host": target.label,
            "changed": True,
            "changed_because": reasons if deployed else ["not deployed"],
            "state": "running",
            "answered_in_s": round(answered, 2),
            **_public(desired),
        }


def _public(desired: dict) -> dict:
    return {k: v for k, v in desired.items() if k not in ("broker_sha256",)}


def status(target: Target, settings: WorkerSettings) -> dict:
    """What is deployed on ``target`` and whether its worker runs and answers."""
    with Session(target) as session:
        layout = _layout(session, settings.install_dir)
        deployed = _read_deployed(session, layout)
        if not deployed:
            return {"host": target.label, "state": "not_deployed", "install_dir": layout.root}
        systemd = deployed.get("init") == "systemd"
        if systemd:
            code, _, _ = session.run(["systemctl", "--user", "is-active", layout.unit], check=False, timeout=30)
            running = code == 0
        else:
            running = _pid(session, layout.worker_pid) is not None
        answered = ping(settings.broker, deployed["worker_name"], 5.0) if running else None
        state = "running" if answered is not None else "not_answering" if running else "stopped"
        return {"host": target.label, "state": state, **_public(deployed)}


def stop(target: Target, settings: WorkerSettings) -> dict:
    """Stop the worker on ``target`` (the install stays; deploy starts it again)."""
    with Session(target) as session:
        layout = _layout(session, settings.install_dir)
        deployed = _read_deployed(session, layout)
        systemd = deployed.get("init") == "systemd"
        was_running = _stop(session, layout, systemd)
        return {"host": target.label, "state": "stopped", "was_running": was_running, "install_dir": layout.root}
