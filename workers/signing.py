"""Signed task messages: Celery's own message signing (``celery.security``), on when configured.

Anyone who can write to the broker can publish a task by hand. With signing on, every task and control
message is serialized by Celery's ``auth`` serializer — signed with the cluster's RSA key, and verified
against the certificates of a trusted store — and a worker refuses any message that is unsigned or
signed by a key the store does not hold, before it is decoded. Results stay JSON (they are read, never
executed). Every party that sends tasks signs: the submitting client, the workers (plans send chords),
Flower and ``npuprof cancel`` (control messages); so all of them get the same three settings:

    NPUPROF_SIGNING_KEY         the private key (PEM, mode 0600)
    NPUPROF_SIGNING_CERT        its certificate (PEM)
    NPUPROF_SIGNING_CERT_STORE  a dir (or glob) of trusted certificates

``npuprof signing-keys DIR`` makes a key, a self-signed certificate and a store holding it; ``npuprof
deploy --signing-dir DIR`` copies them to each worker. The storage check (``workers.storage``) holds
with or without signing: a signed message still names only paths under a worker's storage.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from npuprof.pipeline.errors import UsageError

SIGNING_ENV = ("NPUPROF_SIGNING_KEY", "NPUPROF_SIGNING_CERT", "NPUPROF_SIGNING_CERT_STORE")
KEY_FILE, CERT_FILE, STORE_DIR = "signing_key.pem", "signing_cert.pem", "trusted_certs"
CERT_DAYS = 3650


def signing_files() -> tuple[str, str, str] | None:
    """(key, certificate, store) when signing is configured; None when none of the three is set; a usage
    error naming what is missing when only some are (a half-configured cluster would refuse itself)."""
    values = [os.environ.get(name, "") for name in SIGNING_ENV]
    if not any(values):
        return None
    missing = [name for name, value in zip(SIGNING_ENV, values) if not value]
    if missing:
        raise UsageError(f"message signing needs all of {', '.join(SIGNING_ENV)}: {', '.join(missing)} not set")
    for name, value in zip(SIGNING_ENV[:2], values[:2]):
        if not Path(value).is_file():
            raise UsageError(f"{name}={value}: no such file")
    _require_private(*values)
    return values[0], values[1], values[2]


def _require_private(key: str, cert: str, store: str) -> None:
    """A usage error when the key is readable by others (it is then no secret: ssh refuses such a key
    too) or the trusted store is writable by others (a certificate added there is trusted: anyone could
    sign tasks). The store may be a glob; its dir is checked, and each file in it."""
    if os.stat(key).st_mode & 0o077:
        raise UsageError(f"NPUPROF_SIGNING_KEY={key}: others may read it (chmod 600 {key})")
    folder = Path(store) if Path(store).is_dir() else Path(store).parent
    for path in [folder, *(folder.iterdir() if folder.is_dir() else [])]:
        if path.stat().st_mode & 0o022:
            raise UsageError(f"NPUPROF_SIGNING_CERT_STORE: others may write {path} (chmod go-w {path})")


def files_in(directory: str | Path) -> dict[str, Path]:
    """The signing files ``write_signing_files`` made in ``directory``, by setting name (a usage error
    naming the first that is missing)."""
    base = Path(directory)
    files = dict(zip(SIGNING_ENV, (base / KEY_FILE, base / CERT_FILE, base / STORE_DIR)))
    for name, path in files.items():
        if not (path.is_dir() if name == SIGNING_ENV[2] else path.is_file()):
            raise UsageError(f"signing dir {base}: no {path.name} (make one with npuprof signing-keys DIR)")
    return files


def configure(app) -> bool:
    """Turn on signing for ``app`` when ``signing_files`` says so; whether it did."""
    files = signing_files()
    if files is None:
        return False
    key, cert, store = files
    app.conf.update(
        task_serializer="auth",
        accept_content=["auth"],  # tasks and control messages: signed, or refused undecoded
        result_accept_content=["json"],
        result_serializer="json",
        security_key=key,
        security_certificate=cert,
        security_cert_store=store,
        security_digest="sha256",
    )
    app.setup_security(allowed_serializers=["json"], serializer="json")  # auth: registered by it
    _name_bad_signatures()
    return True


def _name_bad_signatures() -> None:
    """Make Celery's signature check say "Bad signature" when one is bad. Its ``reraise_errors`` catches
    ``(cryptography.exceptions,)`` — a module, not an exception class (celery 5.x) — so a bad signature
    surfaced as "TypeError: catching classes that do not inherit from BaseException" and the worker's
    log never said why it refused the message. The refusal itself held; only its reason was lost."""
    from contextlib import contextmanager

    from celery.security import certificate, key
    from celery.security import utils as security_utils
    from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm

    original = security_utils.reraise_errors

    @contextmanager
    def reraise_errors(msg: str = "{0!r}", errors: tuple | None = None):
        with original(msg, errors or (InvalidSignature, UnsupportedAlgorithm, ValueError, TypeError)):
            yield

    certificate.reraise_errors = key.reraise_errors = reraise_errors


def write_signing_files(directory: Path, name: str = "npuprof cluster") -> dict:
    """A new RSA key (0600), its self-signed certificate and a store that trusts it, in ``directory``
    (which must not hold them already: a cluster's key is not replaced by accident)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key_path, cert_path, store = directory / KEY_FILE, directory / CERT_FILE, directory / STORE_DIR
    existing = [str(p) for p in (key_path, cert_path, store) if os.path.lexists(p)]  # a dangling link too
    if existing:
        raise UsageError(f"{', '.join(existing)} exists: signing files are not replaced (remove them first)")
    store.mkdir(mode=0o755, parents=True)  # others may not add a certificate to trust
    key = rsa.generate_private_key(public_exponent=65537, key_size=3072)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
        .sign(key, hashes.SHA256())
    )
    pem_key = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    pem_cert = cert.public_bytes(serialization.Encoding.PEM)
    for path, data, mode in (
        (key_path, pem_key, 0o600),
        (cert_path, pem_cert, 0o644),
        (store / CERT_FILE, pem_cert, 0o644),
    ):
        # O_EXCL: a file or a link (dangling or not) planted there since the check fails, never written through
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode), "wb") as handle:
            handle.write(data)
    return {
        "NPUPROF_SIGNING_KEY": str(key_path.resolve()),
        "NPUPROF_SIGNING_CERT": str(cert_path.resolve()),
        "NPUPROF_SIGNING_CERT_STORE": str(store.resolve()),
        "expires": (now + datetime.timedelta(days=CERT_DAYS)).date().isoformat(),
    }
