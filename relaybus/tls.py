"""A private certificate authority for ``relaybus up``: HTTPS that a phone trusts without a
warning page once it has installed one root certificate.

The root (EC P-256, ten years) is made once in ``<state dir>/tls/`` (``root.key`` mode 0600,
``root.crt``). It is name-constrained to private and local addresses — loopback, RFC 1918,
CGNAT/tailnet (100.64/10), IPv6 ULA and link-local, ``localhost``, ``.local``, ``.lan``,
``.home.arpa``, ``.internal`` and the names given when it was made (this machine's name) —
so a leaked root key cannot vouch for a public site. The extension is non-critical: clients
that understand it (Chromium, Firefox, iOS, Android) enforce it; older ones still accept
the root. The server certificate (397 days at most, the CA/Browser limit browsers apply)
names what phones open: the LAN address, loopback, ``localhost`` and the host name; it is
remade when those names change, when it is less than 30 days from expiry, or when the root
changed.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ROOT_DAYS = 3650
#: Browsers refuse server certificates valid for longer than 398 days.
SERVER_DAYS = 397
RENEW_BEFORE = dt.timedelta(days=30)
#: Private and local networks the root may vouch for.
PRIVATE_NETWORKS = tuple(
    ipaddress.ip_network(n)
    for n in (
        "127.0.0.0/8",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",
        "169.254.0.0/16",
        "::1/128",
        "fc00::/7",
        "fe80::/10",
    )
)
LOCAL_DOMAINS = ("localhost", "local", "lan", "home.arpa", "internal")
_ORG = "relaybus"

Name = str  # a DNS name or an IP address, as typed


class TlsError(RuntimeError):
    """A certificate or key that cannot be read, made or used (one line)."""


@dataclass(frozen=True)
class CertPaths:
    """A certificate and its key on disk (PEM)."""

    cert: Path
    key: Path


def tls_dir(state_dir: Path) -> Path:
    return state_dir / "tls"


def _save(
    directory: Path, name: str, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate
) -> CertPaths:
    """``name.key`` (0600) and ``name.crt`` (0644) in ``directory``, each replaced atomically."""
    paths = CertPaths(directory / f"{name}.crt", directory / f"{name}.key")
    _write(paths.key, _key_pem(key), 0o600)
    _write(paths.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return paths


def _write(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return None


def _single_network(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(f"{ip}/{ip.max_prefixlen}")


def permitted(name: Name, domains: Iterable[str], networks: Iterable[object]) -> bool:
    """Whether a root constrained to ``domains`` and ``networks`` may vouch for ``name``."""
    ip = _ip(name)
    if ip is not None:
        return any(
            isinstance(n, ipaddress.IPv4Network | ipaddress.IPv6Network)
            and n.version == ip.version
            and ip in n
            for n in networks
        )
    name = name.lower().rstrip(".")
    return any(name == d or name.endswith("." + d) for d in domains)


def _root_name() -> x509.Name:
    host = socket.gethostname()[:40] or "localhost"
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, _ORG),
            x509.NameAttribute(NameOID.COMMON_NAME, f"relaybus private root ({host})"),
        ]
    )


def make_root(directory: Path, extra: Sequence[Name] = ()) -> CertPaths:
    """A new root CA in ``directory`` (key 0600), constrained to private addresses, the local
    domains and ``extra`` (names and addresses this root must also cover)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = ec.generate_private_key(ec.SECP256R1())
    domains = list(LOCAL_DOMAINS)
    networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = list(PRIVATE_NETWORKS)
    for name in extra:
        ip = _ip(name)
        if ip is not None:
            if not permitted(name, (), networks):
                networks.append(_single_network(ip))
        elif name and not permitted(name, domains, ()):
            domains.append(name.lower().rstrip("."))
    subtrees: list[x509.GeneralName] = [x509.DNSName(d) for d in domains]
    subtrees += [x509.IPAddress(n) for n in networks]
    subject = _root_name()
    now = _now()
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=ROOT_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .add_extension(
            x509.NameConstraints(permitted_subtrees=subtrees, excluded_subtrees=None),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    return _save(directory, "root", key, cert)


def ensure_root(directory: Path, extra: Sequence[Name] = ()) -> CertPaths:
    """The root in ``directory``, made on first use; its key is kept at mode 0600."""
    paths = CertPaths(directory / "root.crt", directory / "root.key")
    if not (paths.cert.exists() and paths.key.exists()):
        return make_root(directory, extra)
    if paths.key.stat().st_mode & 0o077:
        os.chmod(paths.key, 0o600)
    return paths


def load_cert(path: Path) -> x509.Certificate:
    """A PEM certificate; ``TlsError`` when it cannot be read."""
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise TlsError(f"cannot read {path}: {exc}") from exc


def _load(paths: CertPaths) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    try:
        cert = x509.load_pem_x509_certificate(paths.cert.read_bytes())
        key = serialization.load_pem_private_key(paths.key.read_bytes(), password=None)
    except (OSError, ValueError) as exc:
        raise TlsError(f"cannot read {paths.cert} / {paths.key}: {exc}") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TlsError(f"{paths.key} is not an EC key")
    return cert, key


def root_constraints(root: x509.Certificate) -> tuple[list[str], list[object]]:
    """The DNS domains and IP networks the root's name constraints permit."""
    try:
        ext = root.extensions.get_extension_for_class(x509.NameConstraints).value
    except x509.ExtensionNotFound:
        return [], []
    subtrees = ext.permitted_subtrees or []
    domains = [g.value for g in subtrees if isinstance(g, x509.DNSName)]
    networks: list[object] = [g.value for g in subtrees if isinstance(g, x509.IPAddress)]
    return domains, networks


def _sans(cert: x509.Certificate) -> set[str]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    names = {str(v) for v in ext.get_values_for_type(x509.DNSName)}
    names |= {str(v) for v in ext.get_values_for_type(x509.IPAddress)}
    return names


def _normal(names: Iterable[Name]) -> list[str]:
    out: dict[str, None] = {}
    for raw in names:
        name = raw.strip().strip("[]").lower().rstrip(".")
        ip = _ip(name)
        if name:
            out[str(ip) if ip is not None else name] = None
    return list(out)


def needs_renewal(server: CertPaths, root: CertPaths, names: Sequence[Name]) -> bool:
    """Missing, other names, near expiry, or not issued by this root."""
    if not (server.cert.exists() and server.key.exists()):
        return True
    try:
        cert, _key = _load(server)
        root_cert, _ = _load(root)
    except TlsError:
        return True
    if _sans(cert) != set(_normal(names)):
        return True
    if cert.not_valid_after_utc - _now() < RENEW_BEFORE:
        return True
    try:
        cert.verify_directly_issued_by(root_cert)
    except (ValueError, TypeError, InvalidSignature):
        return True
    return False


def make_server(
    directory: Path, root: CertPaths, names: Sequence[Name], days: int = SERVER_DAYS
) -> CertPaths:
    """A server certificate for ``names`` issued by ``root`` (key 0600); names the root may
    not vouch for are left out. Raises ``TlsError`` when none is left."""
    root_cert, root_key = _load(root)
    domains, networks = root_constraints(root_cert)
    wanted = [
        n
        for n in _normal(names)
        if (not domains and not networks) or permitted(n, domains, networks)
    ]
    if not wanted:
        raise TlsError(f"the root {root.cert} may vouch for none of: {', '.join(names)}")
    sans: list[x509.GeneralName] = []
    for n in wanted:
        ip = _ip(n)
        sans.append(x509.IPAddress(ip) if ip is not None else x509.DNSName(n))
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, wanted[0])]))
        .issuer_name(root_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=min(days, SERVER_DAYS)))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(root_key.public_key()),
            critical=False,
        )
        .sign(root_key, hashes.SHA256())
    )
    # The chain a client needs besides its trusted root: the server certificate alone.
    return _save(directory, "server", key, cert)


def phone_names(lan_ip: str, extra: Iterable[Name] = ()) -> list[str]:
    """What phones and this machine open: the LAN address, loopback, localhost, this host's
    name (and ``<name>.local``), and ``extra`` (RELAYBUS_PUBLIC_HOSTS)."""
    host = socket.gethostname().lower().rstrip(".")
    names = [lan_ip, "127.0.0.1", "::1", "localhost"]
    if host and host != "localhost":
        names += [host] if "." in host else [host, f"{host}.local"]
    names += [n for n in extra if n.strip()]
    return _normal(names)


def ensure_server(directory: Path, names: Sequence[Name]) -> tuple[CertPaths, CertPaths]:
    """(root, server) in ``directory``: the root made once (also covering ``names``), the
    server certificate remade when :func:`needs_renewal` says so."""
    root = ensure_root(directory, names)
    server = CertPaths(directory / "server.crt", directory / "server.key")
    root_cert, _ = _load(root)
    domains, networks = root_constraints(root_cert)
    allowed = [n for n in _normal(names) if permitted(n, domains, networks)]
    if needs_renewal(server, root, allowed):
        server = make_server(directory, root, allowed)
    return root, server


def check_pair(paths: CertPaths) -> None:
    """A user's own certificate and key: both readable PEM (any key type); ``TlsError``
    otherwise."""
    try:
        x509.load_pem_x509_certificates(paths.cert.read_bytes())
        serialization.load_pem_private_key(paths.key.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise TlsError(f"cannot use RELAYBUS_TLS_CERT/RELAYBUS_TLS_KEY: {exc}") from exc


def der(cert_pem: Path) -> bytes:
    """The certificate in DER (``.crt`` for iOS/Android installs)."""
    return x509.load_pem_x509_certificate(cert_pem.read_bytes()).public_bytes(
        serialization.Encoding.DER
    )
