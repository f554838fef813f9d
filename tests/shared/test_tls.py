"""relaybus.tls: the private root (key 0600, name-constrained), the server certificate and
when it is remade; checked with openssl's own verifier where a chain is concerned."""

from __future__ import annotations

import datetime as dt
import ipaddress
import subprocess
import sys
from pathlib import Path

from cryptography import x509

from relaybus import tls


def _verify(root: Path, leaf: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["openssl", "verify", "-x509_strict", "-CAfile", str(root), str(leaf)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_root_key_is_private_and_constraints_cover_private_names_only(tmp_path: Path) -> None:
    """root.key is 0600 (and put back to 0600); the constraints permit private ranges and
    local names, not a public name or address."""
    root = tls.ensure_root(tmp_path / "tls", ["mybox"])
    assert root.key.stat().st_mode & 0o777 == 0o600
    cert = x509.load_pem_x509_certificate(root.cert.read_bytes())
    ext = cert.extensions.get_extension_for_class(x509.NameConstraints)
    assert not ext.critical
    domains, networks = tls.root_constraints(cert)
    assert {"localhost", "local", "mybox"} <= set(domains)
    assert ipaddress.ip_network("192.168.0.0/16") in networks
    for name in ("192.168.1.20", "10.1.2.3", "::1", "mybox", "phone.local", "localhost"):
        assert tls.permitted(name, domains, networks), name
    for name in ("8.8.8.8", "example.com", "2001:db8::1", "notmybox"):
        assert not tls.permitted(name, domains, networks), name
    root.key.chmod(0o644)
    assert tls.ensure_root(tmp_path / "tls") == root
    assert root.key.stat().st_mode & 0o777 == 0o600


def test_server_certificate_verifies_and_leaves_out_what_the_root_cannot_vouch_for(
    tmp_path: Path,
) -> None:
    """The chain verifies (openssl, strict); a public name is not in the SANs; ≤ 397 days."""
    directory = tmp_path / "tls"
    root = tls.ensure_root(directory)
    server = tls.make_server(directory, root, ["192.168.1.20", "localhost", "example.com"])
    assert server.key.stat().st_mode & 0o777 == 0o600
    result = _verify(root.cert, server.cert)
    assert result.returncode == 0, result.stderr
    cert = x509.load_pem_x509_certificate(server.cert.read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["192.168.1.20"]
    life = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert life <= dt.timedelta(days=398)


def test_renewal_on_new_names_near_expiry_and_new_root(tmp_path: Path) -> None:
    """Same names: kept; another address, a certificate near expiry or another root: remade."""
    directory = tmp_path / "tls"
    names = ["192.168.1.20", "127.0.0.1", "localhost"]
    root, server = tls.ensure_server(directory, names)
    first = server.cert.read_bytes()
    assert tls.ensure_server(directory, names)[1].cert.read_bytes() == first
    assert not tls.needs_renewal(server, root, names)
    assert tls.needs_renewal(server, root, ["192.168.1.21", "127.0.0.1", "localhost"])
    _root, again = tls.ensure_server(directory, ["192.168.1.21", "127.0.0.1", "localhost"])
    assert again.cert.read_bytes() != first
    assert _verify(root.cert, again.cert).returncode == 0
    other = tls.make_root(tmp_path / "other")
    assert tls.needs_renewal(again, other, ["192.168.1.21", "127.0.0.1", "localhost"])
    short = tls.make_server(directory, root, names, days=20)  # 20 days from expiry
    assert tls.needs_renewal(short, root, names)


def test_tls_make_for_compose_and_refusal_of_names_the_root_cannot_cover(tmp_path: Path) -> None:
    """`relaybus tls make` writes a verifying pair for the names given; a later name the
    existing root does not cover is refused with one line and the certificate is kept."""
    directory = tmp_path / "certs"

    def make(*names: str) -> subprocess.CompletedProcess[str]:
        args = [a for n in names for a in ("--name", n)]
        return subprocess.run(
            [sys.executable, "-m", "relaybus.cli", "tls", "make", "--dir", str(directory), *args],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    made = make("relay.example.com", "192.168.1.5")
    assert made.returncode == 0, made.stderr
    server = directory / "server.crt"
    assert _verify(directory / "root.crt", server).returncode == 0
    cert = x509.load_pem_x509_certificate(server.read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) == {"relay.example.com", "localhost"}
    before = server.read_bytes()
    refused = make("other.example.org")
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1 and "other.example.org" in refused.stderr
    assert server.read_bytes() == before
