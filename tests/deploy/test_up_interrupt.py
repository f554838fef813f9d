"""Ctrl-C while `relaybus up` starts: one line and exit 130, never a traceback.

A SIGINT that lands before ``relaybus.cli.main`` runs (the interpreter's own start and the
import of the CLI module, ~0.1 s, longer on a loaded machine) is Python's to report, or kills
the process silently if the interpreter has not installed its handler yet; the test then tries
again a little later, so what it checks is everything from ``main`` on: imports, settings, the
embedded server.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.support.deploy_up import UpProc

ONE_LINE = {"relaybus: interrupted during start-up", "relaybus up: SIGINT during start-up: stopped"}


def _interrupt(tmp: Path, claude_dir: Path, delay_s: float) -> tuple[int, str]:
    """Start `up`, SIGINT it after ``delay_s``; its exit code and stderr."""
    up = UpProc(tmp, claude_dir, env={"RELAYBUS_LOG_LEVEL": "ERROR"})
    up.start()
    try:
        time.sleep(delay_s)  # the moment of the Ctrl-C is the point of the test, not a wait
        code = up.terminate(signum=signal.SIGINT)
    finally:
        up.kill()
    return code, up.log()


@pytest.mark.parametrize("delay_s", [0.2, 0.4, 0.7, 1.0])
def test_ctrl_c_during_start_up_is_one_line(
    tmp_path: Path, claude_dir: Path, delay_s: float
) -> None:
    """SIGINT at any moment of start-up ends `up` with one stderr line and exit 130 (exit 0
    once it serves: a clean stop)."""
    for attempt in range(6):
        code, err = _interrupt(tmp_path / str(attempt), claude_dir, delay_s + 0.1 * attempt)
        if ("Traceback" in err and " in main\n" not in err) or "Fatal Python error" in err:
            continue  # before main: the interpreter's own start
        if code == -signal.SIGINT and not err.strip():
            continue  # before the interpreter installed its SIGINT handler: the default killed it
        break
    else:
        pytest.fail(f"every SIGINT landed before relaybus.cli.main: {err}")
    assert "Traceback" not in err, err
    if code == 0:
        return
    # 130, or death by SIGINT (-2), which a shell reports as 130 too: CPython re-raises the
    # signal at exit when a KeyboardInterrupt passed through C code (an extension module's
    # import) before `main` caught it.
    assert code in (130, -signal.SIGINT), err
    assert set(err.strip().splitlines()) <= ONE_LINE and err.strip(), err
