"""A collector on another machine reaches the team server's Redis the documented way:
TLS (certificates made with deploy/README.md's commands, server flags from
deploy/compose.redis-tls.yml) and the password, with the URL of deploy/collector.env.example."""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import yaml

from relaybus.shared.store.keys import Keys
from tests.conftest import BINARIES
from tests.support.collector_proc import CollectorProc
from tests.support.collector_records import append, transcript, user_line
from tests.support.deploy_files import DEPLOY, interpolate
from tests.support.servers import free_port
from tests.support.wait import poll

PASSWORD = "0123456789abcdef"


def _readme_block(starting: str) -> str:
    """The fenced shell block of deploy/README.md whose first line is ``starting``."""
    text = (DEPLOY / "README.md").read_text()
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        lines = [line.strip() for line in block.splitlines()]
        if lines and lines[0] == starting:
            return "\n".join(lines)
    raise AssertionError(f"no block starting with {starting!r}")


def _make_certificates(directory: Path) -> None:
    """Run the README's certificate commands for the name ``localhost``."""
    script = _readme_block("cd deploy/tls")
    script = script.replace("cd deploy/tls", "set -e", 1)
    script = re.sub(r"^name=\S+.*$", "name=localhost", script, count=1, flags=re.M)
    subprocess.run(
        ["bash", "-c", script], cwd=directory, check=True, capture_output=True, timeout=120
    )


def _server_args(tls_dir: Path, data_dir: Path, tls_port: int) -> list[str]:
    """The override's redis command, made to run here: loopback, temp paths, free ports."""
    override = yaml.safe_load(
        interpolate((DEPLOY / "compose.redis-tls.yml").read_text(), {"REDIS_PASSWORD": PASSWORD})
    )
    args = [str(a) for a in override["services"]["redis"]["command"]]
    args[0] = BINARIES["redis"]  # Debian's redis-server is built with TLS
    args = [a.replace("/tls/", f"{tls_dir}/") for a in args]
    args[args.index("--dir") + 1] = str(data_dir)
    args[args.index("--tls-port") + 1] = str(tls_port)
    return [*args, "--port", "0", "--bind", "127.0.0.1", "--save", ""]


def _documented_url(tls_port: int, ca: Path) -> str:
    """RELAYBUS_REDIS_URL of deploy/collector.env.example, pointed at this test's server."""
    text = (DEPLOY / "collector.env.example").read_text()
    url = re.search(r'^RELAYBUS_REDIS_URL="(\S+)"$', text, re.M)
    assert url is not None
    return (
        url.group(1)
        .replace("CHANGE-ME", PASSWORD)
        .replace("team-server.example.com:6380", f"localhost:{tls_port}")
        .replace("/home/me/.config/relaybus/ca.crt", str(ca))
    )


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """redis-server with the override's flags on a free TLS port; (port, ca.crt)."""
    tls_dir = tmp_path / "tls"
    tls_dir.mkdir()
    _make_certificates(tls_dir)
    port = free_port()
    data = tmp_path / "data"
    data.mkdir()
    with (tmp_path / "server.log").open("wb") as log:
        proc = subprocess.Popen(_server_args(tls_dir, data, port), stdout=log, stderr=log)
    try:
        client = redis.Redis.from_url(_documented_url(port, tls_dir / "ca.crt"), socket_timeout=2)
        poll(lambda: _pings(client), timeout_s=30)
        client.close()
        yield port, tls_dir / "ca.crt"
    finally:
        proc.kill()
        proc.wait(10)


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        time.sleep(0.05)
        return False


def test_collector_publishes_over_tls_with_the_documented_url(
    tls_server: tuple[int, Path], claude_dir: Path, namespace: str
) -> None:
    """A collector with the documented rediss:// URL publishes a transcript line; the TLS
    port refuses plaintext clients and wrong passwords, and the client refuses a server
    whose certificate does not name the host it dialled."""
    port, ca = tls_server
    url = _documented_url(port, ca)
    assert url.startswith("rediss://")
    with pytest.raises(redis.ConnectionError):
        redis.Redis(port=port, socket_timeout=2).ping()
    with pytest.raises(redis.AuthenticationError):
        redis.Redis.from_url(url.replace(f":{PASSWORD}@", ":wrong@"), socket_timeout=2).ping()
    with pytest.raises(redis.ConnectionError, match="certificate"):
        redis.Redis.from_url(url.replace("localhost", "127.0.0.1"), socket_timeout=2).ping()

    sid = str(uuid.uuid4())
    with CollectorProc(redis_url=url, namespace=namespace, claude_dir=claude_dir):
        append(transcript(claude_dir, sid), user_line(sid, "over TLS"))
        client = redis.Redis.from_url(url, socket_timeout=5)
        try:
            entries = poll(lambda: client.xrange(Keys(namespace).session_events(sid)), 60)
        finally:
            client.close()
    fields = entries[0][1]
    assert fields is not None and b"over TLS" in fields[b"f"]
