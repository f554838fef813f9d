"""One test-owned subprocess: start, wait until ready, SIGKILL, stop, and its log tail.

The base of the process helpers (``CollectorProc``, the ``GatewayProc`` classes): a
subclass builds the command line and environment, calls :meth:`spawn`, then
:meth:`wait_until` with its own readiness check.
"""

from __future__ import annotations

import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path


class ManagedProcess:
    """A child process whose stderr goes to ``log_path`` (or nowhere when it is None)."""

    name = "process"

    def __init__(self, log_path: Path | None = None) -> None:
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def spawn(self, argv: list[str], *, cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        err = open(self.log_path, "ab") if self.log_path else None  # noqa: SIM115 - closed below
        try:
            self.proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err if err is not None else subprocess.DEVNULL,
            )
        finally:
            if err is not None:
                err.close()
        return self.proc

    def wait_until(self, ready: Callable[[], bool], timeout_s: float) -> None:
        """Poll ``ready`` until true; RuntimeError if the process exits, TimeoutError after
        ``timeout_s`` (both with the log tail)."""
        proc = self.proc
        assert proc is not None
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {proc.returncode}: {self.log()}")
            if ready():
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} not ready after {timeout_s}s: {self.log()}")
            time.sleep(0.05)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self, timeout_s: float = 15.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.proc is not None
        self.proc.terminate()
        return self.proc.wait(timeout_s)

    def kill(self) -> None:
        """SIGKILL and reap, as in a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGCONT (in case a test froze it), SIGTERM, then SIGKILL after ``timeout_s``."""
        if not self.alive():
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)
        stop_process(self.proc, timeout_s)

    def log(self) -> str:
        """The last 4000 characters of the log ("" when there is none)."""
        if self.log_path is None:
            return ""
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return ""


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM and wait up to ``timeout_s``; then SIGKILL and reap."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def http_ok(url: str) -> bool:
    """Whether ``url`` answers 200 now (for :meth:`ManagedProcess.wait_until`)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False
