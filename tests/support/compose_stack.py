"""The project's own docker-compose.yml, run by tests/compose with docker-compose (v1).

Only what this machine needs differs from an operator's `docker compose up`: the base images
(stand-ins, tests/support/compose_images.py, through the documented *_IMAGE variables), the
build network (host: with `--iptables=false` the default bridge has no way out to the
package index), a project name, a loopback-only published port and a test-owned Claude dir.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.compose_images import DOCKER, NGINX, PYTHON, VALKEY
from tests.support.deploy_files import COMPOSE
from tests.support.servers import free_port

#: Local CA certificates (a TLS-inspecting egress proxy) the image build must trust.
LOCAL_CAS = Path("/usr/local/share/ca-certificates")
#: Services that run once and exit (docker-compose.yml).
ONE_SHOT = frozenset({"certs"})
BUILD_OVERRIDE = """services:
  gateway:
    build:
      network: host
  collector:
    build:
      network: host
  certs:
    build:
      network: host
"""


def local_ca_certs() -> str:
    if not LOCAL_CAS.is_dir():
        return ""
    return "".join(p.read_text() for p in sorted(LOCAL_CAS.glob("*.crt")))


@dataclass
class ComposeStack:
    """One compose project: ``workdir`` holds its .env, override file and Claude dir."""

    workdir: Path
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    port: int = field(default_factory=free_port)
    project: str = field(default_factory=lambda: f"rbtest{uuid.uuid4().hex[:8]}")
    #: The collector's uid/gid: the owner of the Claude dir (as root: 1000, a user's).
    uid: int = field(default_factory=lambda: 1000 if os.geteuid() == 0 else os.getuid())
    gid: int = field(default_factory=lambda: 1000 if os.geteuid() == 0 else os.getgid())
    #: seconds from `up -d` until every service was healthy
    healthy_s: float = 0.0

    def __post_init__(self) -> None:
        self.claude_dir = self.workdir / "claude"
        for sub in ("projects", "sessions"):
            (self.claude_dir / sub).mkdir(parents=True, exist_ok=True)
        for path in (self.claude_dir, self.claude_dir / "projects", self.claude_dir / "sessions"):
            path.chmod(0o755)
            chown(path, self.uid, self.gid)
        self.env_file = self.workdir / "env"
        self.env_file.write_text(
            "".join(
                f"{k}={v}\n"
                for k, v in {
                    "COMPOSE_PROJECT_NAME": self.project,
                    "REDIS_PASSWORD": uuid.uuid4().hex,
                    "RELAYBUS_TOKENS": self.token,
                    # "127.0.0.1:<port>" makes the published port "127.0.0.1:<port>:8080".
                    "RELAYBUS_PUBLIC_PORT": f"127.0.0.1:{self.port}",
                    "RELAYBUS_IMAGE_TAG": "compose-test",
                    "CLAUDE_DIR": str(self.claude_dir),
                    "RELAYBUS_UID": str(self.uid),
                    "RELAYBUS_GID": str(self.gid),
                }.items()
            )
        )
        self.override = self.workdir / "build-network.yml"
        self.override.write_text(BUILD_OVERRIDE)
        # An empty certificate folder: the certs service makes the root and nginx's certificate.
        self.certs = self.workdir / "certs"
        self.certs.mkdir()
        with self.env_file.open("a") as f:
            f.write(f"RELAYBUS_CERTS_DIR={self.certs}\nRELAYBUS_CERT_NAMES=127.0.0.1\n")

    def ssl_context(self) -> ssl.SSLContext:
        """Trusts only the root the stack's certs service made."""
        return ssl.create_default_context(cafile=str(self.certs / "root.crt"))

    def compose(self, *args: str, timeout_s: float = 300) -> str:
        """Run docker-compose with this project's files; its stdout (raises on failure)."""
        argv = ["docker-compose", "--env-file", str(self.env_file)]
        argv += ["-p", self.project, "-f", str(COMPOSE), "-f", str(self.override), *args]
        env = {
            "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
            "HOME": str(self.workdir),
            # BuildKit through the docker CLI: the classic builder commits a full copy of the
            # root file system (vfs) for each metadata step, minutes per build.
            "COMPOSE_DOCKER_CLI_BUILD": "1",
            "DOCKER_BUILDKIT": "1",
            "PYTHON_IMAGE": PYTHON.tag,
            "VALKEY_IMAGE": VALKEY.tag,
            "NGINX_IMAGE": NGINX.tag,
            "BUILD_CA_CERTS": local_ca_certs(),
        }
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)
        if out.returncode != 0:
            raise RuntimeError(f"docker-compose {' '.join(args)}: {out.stderr[-3000:]}")
        return out.stdout

    def containers(self, service: str) -> list[str]:
        """Ids of the service's running containers."""
        return self.compose("ps", "-q", service).split()

    def health(self) -> dict[str, str]:
        """Health status of every long-running container of the project, by container name
        (the one-shot certs service has exited 0 once nginx runs: nginx depends on it)."""
        ids = self.compose("ps", "-q").split()
        if not ids:
            return {}
        out = docker("inspect", *ids)
        return {
            c["Name"].lstrip("/"): c["State"].get("Health", {}).get("Status", c["State"]["Status"])
            for c in json.loads(out)
            if c["Config"]["Labels"].get("com.docker.compose.service") not in ONE_SHOT
        }

    def wait_healthy(self, services: int, timeout_s: float = 180) -> float:
        """Seconds until ``services`` containers report healthy (TimeoutError otherwise)."""
        start = time.monotonic()
        while True:
            health = self.health()
            if len(health) == services and all(s == "healthy" for s in health.values()):
                return time.monotonic() - start
            if time.monotonic() - start > timeout_s:
                raise TimeoutError(f"not healthy: {health}\n{self.logs()}")
            time.sleep(1)

    def logs(self) -> str:
        try:
            return self.compose("logs", "--no-color", "--tail", "40", timeout_s=60)[-6000:]
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            return str(exc)

    def exec_python(self, container: str, code: str) -> str:
        """Run ``python -c code`` inside a container; its stdout."""
        return docker("exec", container, "python", "-c", code)


def docker(*args: str, timeout_s: float = 120) -> str:
    out = subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=timeout_s)
    if out.returncode != 0:
        raise RuntimeError(f"docker {args[0]}: {out.stderr[-2000:]}")
    return out.stdout


def chown(path: Path, uid: int, gid: int) -> None:
    """Give ``path`` to uid/gid where this process may (root); otherwise leave it."""
    if os.geteuid() == 0:
        os.chown(path, uid, gid)
