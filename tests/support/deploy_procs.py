"""nginx and Prometheus as test-owned processes: deploy/ configs adapted to loopback."""

from __future__ import annotations

import json
import ssl
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
from tests.support.procs import stop_process
from tests.support.servers import free_port

NGINX = "/usr/sbin/nginx"
PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"
_GATEWAY_URL_LINE = "        set $gateway_url http://gateway:8080;\n"
_LISTEN_LINES = "        listen 8080 ssl;\n        include nginx-tls.conf;\n"
_CERTS_DIR = "/etc/nginx/certs/"


def _replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"deploy file changed; expected exactly one {old!r}"
    return text.replace(old, new)


def render_nginx_conf(
    workdir: Path, listen_port: int, upstream_ports: list[int], certs: Path | None = None
) -> Path:
    """deploy/nginx.conf with loopback upstreams and listen port; temp files under workdir.

    Plain http unless ``certs`` (a ``relaybus tls make`` directory): then deploy/nginx-tls.conf
    with its certificate paths there.

    Outside Docker there is no DNS name ``gateway``: $gateway_url names an upstream block of
    the loopback gateways instead (nginx looks a proxy_pass variable up among its upstreams
    before it resolves it).
    """
    text = (DEPLOY / "nginx.conf").read_text()
    servers = "".join(
        f"        server 127.0.0.1:{p} max_fails=1 fail_timeout=5s;\n" for p in upstream_ports
    )
    text = _replace_once(text, _GATEWAY_URL_LINE, "        set $gateway_url http://gateways;\n")
    text = _replace_once(
        text, "    server {\n", f"    upstream gateways {{\n{servers}    }}\n\n    server {{\n"
    )
    if certs is None:
        listen = f"        listen 127.0.0.1:{listen_port};\n"
    else:
        tls_conf = (DEPLOY / "nginx-tls.conf").read_text()
        (workdir / "nginx-tls.conf").write_text(tls_conf.replace(_CERTS_DIR, f"{certs}/"))
        listen = f"        listen 127.0.0.1:{listen_port} ssl;\n        include nginx-tls.conf;\n"
    text = _replace_once(text, _LISTEN_LINES, listen)
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


def wait_http(
    url: str, timeout_s: float = 30.0, alive: subprocess.Popen[bytes] | None = None
) -> None:
    """Wait until ``url`` answers 2xx; RuntimeError if the ``alive`` process exits first."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except (OSError, urllib.error.URLError):
            if alive is not None and alive.poll() is not None:
                raise RuntimeError(f"exited with {alive.returncode} before {url}") from None
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
    #: Exact text replacements applied to the rendered nginx.conf (e.g. shorter timeouts).
    edits: dict[str, str] = field(default_factory=dict)
    #: HTTPS with the certificates of this ``relaybus tls make`` directory (root.crt trusted).
    certs: Path | None = None

    def start(self) -> None:
        """Start nginx; on a port taken since it was chosen, retry on another one."""
        for attempt in range(3):
            if self._launch():
                return
            if attempt == 2 or "Address already in use" not in self.log():
                raise RuntimeError(f"nginx did not start: {self.log()}")
            self.port = free_port()

    def _launch(self) -> bool:
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = render_nginx_conf(self.workdir, self.port, self.upstream_ports, self.certs)
        text = conf.read_text()
        for old, new in self.edits.items():
            assert old in text, old
            text = text.replace(old, new)
        conf.write_text(text)
        log = (self.workdir / "nginx.out").open("wb")
        proc = subprocess.Popen(
            [NGINX, "-e", "stderr", "-p", str(self.workdir), "-c", str(conf),
             "-g", f"pid {self.workdir / 'nginx.pid'}; daemon off;"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        self.proc = proc
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            if _nginx_answers(self.port, self.certs):
                return True
            time.sleep(0.05)
        self.stop()
        return False

    def log(self) -> str:
        return (self.workdir / "nginx.out").read_text(errors="replace")

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, 15)  # SIGTERM is a fast shutdown of master and workers
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
        """Start Prometheus; on a port taken since it was chosen, retry on another one."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = render_prometheus_config(self.workdir, self.targets)
        for attempt in range(3):
            log = (self.workdir / "prometheus.out").open("wb")
            self.proc = subprocess.Popen(
                [PROMETHEUS, f"--config.file={config}",
                 f"--storage.tsdb.path={self.workdir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
            log.close()
            try:
                wait_http(f"{self.url}/-/ready", timeout_s=60, alive=self.proc)
                return
            except (TimeoutError, RuntimeError):
                self.stop()
                out = (self.workdir / "prometheus.out").read_text(errors="replace")
                if attempt == 2 or "address already in use" not in out:
                    raise RuntimeError(f"prometheus did not start: {out[-2000:]}") from None
                self.port = free_port()

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
        if self.proc is not None:
            stop_process(self.proc, 30)
        self.proc = None


def _nginx_answers(port: int, certs: Path | None = None) -> bool:
    """Whether nginx itself (not whatever else holds the port) serves there: its own 404
    for /metrics, answered without any upstream (over HTTPS trusting ``certs/root.crt``)."""
    scheme, context = "http", None
    if certs is not None:
        scheme, context = "https", ssl.create_default_context(cafile=str(certs / "root.crt"))
    try:
        urllib.request.urlopen(
            f"{scheme}://127.0.0.1:{port}/metrics", timeout=2, context=context
        ).close()
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code == 404 and exc.headers.get("Server") == "nginx"
    except OSError:
        return False
    return False
