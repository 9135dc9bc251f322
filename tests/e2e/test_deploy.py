"""deploy and fetch --via against a real OpenSSH server on loopback, a password-protected Redis, the CLI.

The "remote" is this machine under its own install dir: the deployed worker is a separate venv and
process that only the SSH session created. One deployment serves the module (it takes ~20 s).
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import urllib.request
from base64 import b64encode
from pathlib import Path

import pytest
from conftest import run_cli
from service_client import build_search_root, wait_done
from service_harness import RedisServer, free_port, redis_values, wait_until
from sshd_harness import SshServer

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("deploy")]

PASSWORD = "s3cret-Pa55_w0rd"
# the deployed worker: one process on the storage.remote queue, planning roots under /tmp onto it
WORKER = ["-Q", "storage.remote", "--storage-map", "remote=/tmp", "-c", "1", "--system-site-packages"]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    server = SshServer(tmp_path_factory.mktemp("sshd")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis"), password=PASSWORD)
    server.start()
    server.url_file = server.workdir / "broker_url"  # how the README passes a password: never on argv
    server.url_file.write_text(server.url + "\n")
    server.url_file.chmod(0o600)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def deployed(sshd, broker, tmp_path_factory):
    """One worker deployed over SSH into a dir whose name would inject shell commands if pasted."""
    base = tmp_path_factory.mktemp("remote")
    canary = base / "canary"
    install_dir = f"{base}/worker dir; touch {canary}1 $(touch {canary}2) `touch {canary}3` 'q\""
    common = [f"{sshd.user}@127.0.0.1", *sshd.ssh_args(), "--broker-file", str(broker.url_file)]
    common += ["--install-dir", install_dir]
    keys = run_cli("signing-keys", str(base / "keys"))  # the deployed worker takes signed messages only
    assert keys.returncode == 0, keys.stderr
    worker = [*WORKER, "--signing-dir", str(base / "keys")]
    first = run_cli("deploy", *common, *worker, "--ping-timeout", "90", timeout=600)
    signing = {k: v for k, v in keys.result.items() if k.startswith("NPUPROF_SIGNING_")}
    yield {
        "run": first,
        "common": common,
        "worker": worker,
        "signing": signing,
        "install_dir": install_dir,
        "canary": canary,
        "base": base,
    }
    run_cli("deploy", *common, "--stop", timeout=180)


def test_deploy_installs_a_worker_that_answers_and_running_it_again_changes_nothing(deployed, sshd, broker):
    first = deployed["run"]
    assert first.returncode == 0, first.stderr
    host = first.result["hosts"][0]
    assert host["changed"] is True and host["state"] == "running" and host["init"] == "supervisor"
    assert host["install_dir"] == deployed["install_dir"]  # one directory, however odd its name
    again = run_cli("deploy", *deployed["common"], *deployed["worker"], timeout=600)
    assert again.returncode == 0, again.stderr
    assert again.result["hosts"][0]["changed"] is False, again.result["hosts"][0].get("changed_because")
    status = run_cli("deploy", *deployed["common"], "--status", env=deployed["signing"])
    assert status.result["hosts"][0]["state"] == "running" and status.result["hosts"][0]["queues"] == ["storage.remote"]
    # the injection attempts in the dir name ran nothing
    assert not any(Path(f"{deployed['canary']}{n}").exists() for n in (1, 2, 3))
    env_file = Path(deployed["install_dir"]) / "worker.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    url_file = Path(deployed["install_dir"]) / "broker_url"
    assert stat.S_IMODE(url_file.stat().st_mode) == 0o600 and PASSWORD in url_file.read_text()  # its one place
    assert PASSWORD not in env_file.read_text()
    # the worker and the pool child it forks to analyze captures hold the file's path, not the password
    worker = int((Path(deployed["install_dir"]) / "run" / "worker.pid").read_text())
    processes = [worker, *map(int, Path(f"/proc/{worker}/task/{worker}/children").read_text().split())]
    assert len(processes) >= 2 and not [
        p for p in processes if PASSWORD.encode() in Path(f"/proc/{p}/environ").read_bytes()
    ]
    key = Path(deployed["install_dir"]) / "signing" / "signing_key.pem"
    assert (
        stat.S_IMODE(key.stat().st_mode) == 0o600
        and f"NPUPROF_SIGNING_KEY={shlex.quote(str(key))}\n" in env_file.read_text()
    )


def test_a_sweep_runs_on_the_deployed_worker_and_is_fetched_over_sftp(deployed, sshd, broker, tmp_path):
    assert deployed["run"].returncode == 0, deployed["run"].stderr
    search = build_search_root(tmp_path / "captures", ["clean", "slow_rank"], extra_samples=False)
    archive = tmp_path / "archive"
    run = run_cli(
        "submit",
        "--search-root",
        str(search),
        "-o",
        str(archive),
        "--broker",
        broker.url,
        "--queue",
        "storage.remote",
        env=deployed["signing"],  # the client signs what it sends, as the worker expects
    )
    assert run.returncode == 0, run.stderr
    sweep_id = run.result["sweep_id"]
    final = wait_done(broker.url, sweep_id)
    assert final["totals"] == {"SUCCESS": 2}
    via = f"ssh://{sshd.user}@127.0.0.1:{sshd.port}"
    ssh = ["--key", str(sshd.client_key), "--known-hosts", str(sshd.known_hosts)]
    fetched = run_cli(
        "fetch",
        sweep_id,
        "--root",
        "case_01_slow_rank",
        "-o",
        str(tmp_path / "dest"),
        "--broker",
        broker.url,
        "--via",
        via,
        *ssh,
    )
    assert fetched.returncode == 0, fetched.stderr
    for copied in map(Path, fetched.result["copied"]):
        original = archive / copied.relative_to(tmp_path / "dest")
        assert copied.read_bytes() == original.read_bytes()
    names = {Path(p).name for p in fetched.result["copied"]}
    assert {"sweep_class_rollup.csv", "analysis_summary.json", "report.md", "manifest.json"} <= names
    # a symlink that leads out of the archive is refused, not followed
    outside = tmp_path / "outside" / "report"
    outside.mkdir(parents=True)
    (outside / "report.md").write_text("secret outside the archive\n")
    report_md = next(Path(p) for p in fetched.result["copied"] if Path(p).name == "report.md")
    report_dir = archive / report_md.parent.relative_to(tmp_path / "dest")
    os.rename(report_dir, tmp_path / "moved_report")
    report_dir.symlink_to(outside, target_is_directory=True)
    refused = run_cli(
        "fetch",
        sweep_id,
        "--root",
        "case_01_slow_rank",
        "-o",
        str(tmp_path / "dest2"),
        "--broker",
        broker.url,
        "--via",
        via,
        *ssh,
    )
    assert refused.returncode == 3 and "outside the sweep's archive" in refused.stderr
    assert not list((tmp_path / "dest2").rglob("report.md"))
    traversal = run_cli(
        "fetch",
        sweep_id,
        "--root",
        "../../etc",
        "-o",
        str(tmp_path / "dest3"),
        "--broker",
        broker.url,
        "--via",
        via,
        *ssh,
    )
    assert traversal.returncode == 2 and "not part of sweep" in traversal.stderr
    # the broker password is in no output, log, manifest, record or task argument
    assert_password_absent(deployed, [run, final, fetched, refused, traversal], archive, broker)


def assert_password_absent(deployed, runs, archive: Path, broker: RedisServer) -> None:
    texts = [json.dumps(r if isinstance(r, dict) else {"o": r.stdout, "e": r.stderr}) for r in runs]
    texts += [json.dumps({"o": deployed["run"].stdout, "e": deployed["run"].stderr})]
    install = Path(deployed["install_dir"])
    texts += [p.read_text(errors="replace") for p in (install / "log").iterdir()]
    texts.append((install / "deployed.json").read_text())
    texts += [p.read_text(errors="replace") for p in archive.rglob("*.json")]
    texts += [v for v in redis_values(broker.url)]
    leaks = [t[:200] for t in texts if PASSWORD in t]
    assert not leaks, leaks
    assert any("redis://:**@" in t or "redis://:***@" in t for t in texts)  # it was there, masked


def test_a_broker_url_that_does_not_parse_is_one_clean_line_without_its_password(sshd):
    bad = run_cli("deploy", "127.0.0.1", "--broker", "redis://:pa;ss@127.0.0.1:6379/0", "--status")
    assert bad.returncode == 2 and "%3B" in bad.stderr and "pa;ss" not in bad.stderr + bad.stdout
    assert "Traceback" not in bad.stderr


def test_an_unknown_host_key_is_refused_unless_accepted(sshd, broker, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    common = [f"{sshd.user}@127.0.0.1", "--port", str(sshd.port), "--key", str(sshd.client_key)]
    common += [
        "--known-hosts",
        str(empty),
        "--broker-file",
        str(broker.url_file),
        "--install-dir",
        str(tmp_path / "none"),
    ]
    refused = run_cli("deploy", *common, "--status")
    assert refused.returncode == 9 and "host key is not in" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
    accepted = run_cli("deploy", *common, "--status", "--accept-new-host-key")
    assert accepted.returncode == 0 and accepted.result["hosts"][0]["state"] == "not_deployed"
    assert sshd.host_key.with_suffix(".pub").read_text().split()[1] in empty.read_text()  # recorded
    wrong = tmp_path / "wrong_known_hosts"
    other_key = tmp_path / "other_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)], check=True)
    other_public = " ".join(other_key.with_suffix(".pub").read_text().split()[:2])
    wrong.write_text(f"[127.0.0.1]:{sshd.port} {other_public}\n")
    changed = run_cli(
        "deploy", *common[:-6], "--known-hosts", str(wrong), "--broker-file", str(broker.url_file), "--status"
    )
    assert changed.returncode == 9 and "does not match" in changed.stderr  # a changed key is never accepted


def test_flower_listens_on_loopback_and_needs_a_password_elsewhere(broker, tmp_path):
    refused = run_cli("flower", "--address", "0.0.0.0", "--broker", broker.url)
    assert refused.returncode == 2 and "--basic-auth-file" in refused.stderr
    users = tmp_path / "flower_users"
    users.write_text("admin:flower-Pw\n")
    port = free_port()
    flower = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "npuprof.api.cli",
            "flower",
            "--port",
            str(port),
            "--broker",
            broker.url,
            "--basic-auth-file",
            str(users),
        ],
        stdout=open(tmp_path / "flower.log", "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}/workers"

        def status_of(headers: dict) -> int:
            try:
                return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=2).status
            except urllib.error.HTTPError as exc:
                return exc.code
            except OSError:
                return 0

        assert wait_until(lambda: status_of({}) == 401, 60, "flower to ask for a password")
        token = b64encode(b"admin:flower-Pw").decode()
        assert status_of({"Authorization": f"Basic {token}"}) == 200
        ps = subprocess.run(["ps", "-o", "args=", "-p", str(flower.pid)], capture_output=True, text=True).stdout
        assert "flower-Pw" not in ps and PASSWORD not in ps
    finally:
        flower.terminate()
        flower.wait(timeout=30)


def test_stop_ends_the_worker_and_status_says_so(deployed):
    assert deployed["run"].returncode == 0, deployed["run"].stderr
    stopped = run_cli("deploy", *deployed["common"], "--stop", timeout=180)
    assert stopped.returncode == 0 and stopped.result["hosts"][0]["was_running"] is True
    status = run_cli("deploy", *deployed["common"], "--status", env=deployed["signing"])
    assert status.result["hosts"][0]["state"] == "stopped"
    assert not (Path(deployed["install_dir"]) / "run" / "worker.pid").exists()


def test_a_systemd_unit_line_keeps_an_odd_path_one_literal_word():
    from npuprof.deploy.install import systemd_quote

    # systemd expands % specifiers and $VARIABLES and splits on spaces unless quoted and doubled
    assert systemd_quote('/opt/a b/%h $HOME "q"\\x') == '"/opt/a b/%%h $$HOME \\"q\\"\\\\x"'
