"""nginx and Prometheus as test-owned processes: deploy/ configs adapted to loopback."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.deploy_files import DEPLOY
from tests.support.servers import free_port

NGINX = "/usr/sbin/nginx"
PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"
_UPSTREAM_LINE = "        server gateway:8080 max_fails=1 fail_timeout=5s;\n"
_LISTEN_LINE = "        listen 8080;\n"


def _replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"deploy file changed; expected exactly one {old!r}"
    return text.replace(old, new)


def render_nginx_conf(workdir: Path, listen_port: int, upstream_ports: list[int]) -> Path:
    """deploy/nginx.conf with loopback upstreams and listen port; temp files under workdir."""
    text = (DEPLOY / "nginx.conf").read_text()
    servers = "".join(
        _UPSTREAM_LINE.replace("gateway:8080", f"127.0.0.1:{p}") for p in upstream_ports
    )
    text = _replace_once(text, _UPSTREAM_LINE, servers)
    text = _replace_once(text, _LISTEN_LINE, f"        listen 127.0.0.1:{listen_port};\n")
    temp = "".join(
        f"    {kind}_temp_path {workdir / kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    text = _replace_once(text, "http {\n", "http {\n" + temp)
    conf = workdir / "nginx.conf"
    conf.write_text(text)
    return conf


def render_prometheus_config(
    workdir: Path, targets: dict[str, list[str]], scrape_interval_ms: int = 1000
) -> Path:
    """deploy/prometheus.yml with each DNS-SD job turned into static loopback targets.

    ``targets`` maps a DNS-SD name (``gateway``, ``collector``) to ``host:port`` targets.
    """
    config: dict[str, Any] = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    config["global"]["scrape_interval"] = f"{scrape_interval_ms}ms"
    for job in config["scrape_configs"]:
        sd = job.pop("dns_sd_configs", None)
        if sd is not None:
            names = [n for cfg in sd for n in cfg["names"]]
            job["static_configs"] = [{"targets": [t for n in names for t in targets[n]]}]
        for fsd in job.get("file_sd_configs", []):
            (workdir / "targets").mkdir(exist_ok=True)
            fsd["files"] = [str(workdir / "targets" / Path(f).name) for f in fsd["files"]]
    path = workdir / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60)


def wait_http(url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except (OSError, urllib.error.URLError):
            if time.monotonic() > deadline:
                raise TimeoutError(url) from None
            time.sleep(0.1)


@dataclass
class Nginx:
    """An nginx master owned by a test, on a free loopback port."""

    workdir: Path
    upstream_ports: list[int]
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = render_nginx_conf(self.workdir, self.port, self.upstream_ports)
        log = (self.workdir / "nginx.out").open("wb")
        self.proc = subprocess.Popen(
            [NGINX, "-e", "stderr", "-p", str(self.workdir), "-c", str(conf),
             "-g", f"pid {self.workdir / 'nginx.pid'}; daemon off;"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + 30
        while not _port_open(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nginx did not start: {self.log()}")
            time.sleep(0.05)

    def log(self) -> str:
        return (self.workdir / "nginx.out").read_text(errors="replace")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: fast shutdown of master and workers
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None


@dataclass
class Prometheus:
    """A Prometheus server owned by a test, scraping loopback targets every second."""

    workdir: Path
    targets: dict[str, list[str]]
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = render_prometheus_config(self.workdir, self.targets)
        log = (self.workdir / "prometheus.out").open("wb")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}",
             f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        wait_http(f"{self.url}/-/ready", timeout_s=60)

    def api(self, path: str, **params: str) -> dict[str, Any]:
        """GET an API path; the decoded JSON body, also for 4xx answers (parse errors)."""
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                body = resp.read()
        except urllib.error.HTTPError as exc:
            body = exc.read()
        result: dict[str, Any] = json.loads(body)
        return result

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None


def _port_open(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0
