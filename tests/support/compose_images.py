"""Stand-in base images for tests/compose, built offline from Debian packages.

No image registry is reachable from the test machines, so each base image that
docker-compose.yml and the Dockerfile name is replaced by a Debian bookworm root file system
(``mmdebstrap --variant=minbase … | docker import``) with the same commands in the same
places. Each image is tagged with a hash of its recipe, so a warm run reuses it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from dataclasses import dataclass

DOCKER = "/usr/bin/docker"  # Debian's docker.io CLI, the one this stage is proven with
SUITE = "bookworm"
#: Trims docs, man pages and locales: vfs copies every layer for every container.
_DPKG_OPTS = [
    "path-exclude=/usr/share/doc/*",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/locale/*",
]


@dataclass(frozen=True)
class StandIn:
    """One stand-in image: Debian packages, a shell hook run on the root, the image config."""

    name: str
    packages: tuple[str, ...]
    hook: str
    changes: tuple[str, ...]

    @property
    def tag(self) -> str:
        recipe = json.dumps([SUITE, _DPKG_OPTS, self.packages, self.hook, self.changes])
        return f"relaybus-standin-{self.name}:{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"


#: python:3.11-slim: `python` on PATH, venv and pip from Debian (bookworm's Python is 3.11).
PYTHON = StandIn(
    "python",
    ("python3", "python3-venv", "ca-certificates"),
    'ln -s /usr/bin/python3 "$1/usr/local/bin/python"',
    ('CMD ["python3"]',),
)
#: valkey/valkey: Debian's redis-server under Valkey's command names, data in /data.
VALKEY = StandIn(
    "valkey",
    ("redis-server", "redis-tools"),
    'ln -s /usr/bin/redis-server "$1/usr/local/bin/valkey-server"'
    ' && ln -s /usr/bin/redis-cli "$1/usr/local/bin/valkey-cli" && mkdir -p "$1/data"',
    ('CMD ["valkey-server"]', "WORKDIR /data"),
)
#: nginx: Debian's nginx-light, with wget for the compose health check.
NGINX = StandIn(
    "nginx",
    ("nginx-light", "wget"),
    'rm -f "$1/etc/nginx/sites-enabled/default"',
    ('CMD ["nginx", "-g", "daemon off;"]',),
)
STAND_INS = (PYTHON, VALKEY, NGINX)


def docker_ready() -> str | None:
    """None when a Docker daemon, docker-compose v1 and mmdebstrap are usable; else why not."""
    for tool in (DOCKER, "docker-compose", "mmdebstrap"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/check installs it)"
    info = subprocess.run([DOCKER, "info"], capture_output=True, timeout=30)
    if info.returncode != 0:
        return "no Docker daemon answers (scripts/check starts dockerd where it can)"
    return None


def image_exists(tag: str) -> bool:
    out = subprocess.run([DOCKER, "image", "inspect", tag], capture_output=True, timeout=30)
    return out.returncode == 0


def build(image: StandIn) -> str:
    """The stand-in's tag, built now unless an image of the same recipe exists."""
    if image_exists(image.tag):
        return image.tag
    debootstrap = [
        "mmdebstrap",
        "--quiet",
        "--mode=unshare",
        "--variant=minbase",
        f"--include={','.join(image.packages)}",
        *[f"--dpkgopt={opt}" for opt in _DPKG_OPTS],
        f"--customize-hook={image.hook}",
        '--customize-hook=rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*',
        SUITE,
        "-",
    ]
    importer = [DOCKER, "import", *[f"--change={c}" for c in image.changes], "-", image.tag]
    with subprocess.Popen(debootstrap, stdout=subprocess.PIPE) as root:
        assert root.stdout is not None
        imported = subprocess.run(importer, stdin=root.stdout, capture_output=True, timeout=900)
        root.stdout.close()
        if imported.returncode != 0:
            root.kill()
            raise RuntimeError(f"docker import of {image.name}: {imported.stderr.decode()}")
        if root.wait(timeout=60) != 0:
            raise RuntimeError(f"mmdebstrap failed for {image.name}")
    return image.tag
