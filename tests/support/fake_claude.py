"""A stand-in ``claude`` executable for tests: appends realistic records like the real CLI.

Headless (``-p``): ``claude -p --resume[=]<sid> | --session-id[=]<sid> [args] -- <message>``
appends a user record, then assistant records (the last with ``stop_reason: end_turn``) to
``$CLAUDE_CONFIG_DIR/projects/<encoded cwd>/<sid>.jsonl``. A message containing ``LONG``
keeps the turn running until SIGINT, which appends ``[Request interrupted by user]`` and
exits; one containing ``FAIL`` is taken (its user record written), then the run prints an
API error and exits 1, as the real CLI does when the API refuses. Like the real CLI, ``--resume`` of a missing transcript and ``--session-id`` of an
existing one fail. Each invocation's argv is appended to ``$FAKE_CLAUDE_LOG`` if set.

Interactive (no ``-p``): announces itself in ``$CLAUDE_CONFIG_DIR/sessions/<pid>.json``,
reads keys from its terminal (bracketed paste on), submits on Enter and treats Escape as an
interrupt.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import select
import signal
import sys
import termios
import time
import tty
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
INTERRUPTED = "[Request interrupted by user]"
PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"
VERSION = "2.1.316"


def install(bin_dir: Path) -> Path:
    """Write an executable ``claude`` wrapper into ``bin_dir`` and return its path."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "claude"
    path.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "from tests.support.fake_claude import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    path.chmod(0o755)
    return path


def interactive_argv(sid: str) -> list[str]:
    """The interactive stand-in's command, whose process looks like the CLI (``argv[0]`` is
    ``claude``): the tmux driver types only into a pane whose process does."""
    return [
        "bash",
        "-c",
        'exec -a claude "$0" "$@"',
        sys.executable,
        "-m",
        "tests.support.fake_claude",
        "--session-id",
        sid,
    ]


def encode_cwd(cwd: str) -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", cwd)


def transcript_path(claude_dir: Path, cwd: str, sid: str) -> Path:
    return claude_dir / "projects" / encode_cwd(cwd) / f"{sid}.jsonl"


def _stamp() -> str:
    now = datetime.datetime.now(datetime.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


class Transcript:
    """Appends chained records to one session file, one whole line per write."""

    def __init__(self, path: Path, sid: str, cwd: str, entrypoint: str) -> None:
        self.path, self.sid, self.cwd, self.entrypoint = path, sid, cwd, entrypoint
        self.parent: str | None = None
        if path.exists():
            for line in path.read_bytes().splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and rec.get("uuid"):
                    self.parent = rec["uuid"]

    def _append(self, record: dict[str, Any]) -> None:
        base: dict[str, Any] = {
            "parentUuid": self.parent,
            "isSidechain": False,
            "userType": "external",
            "cwd": self.cwd,
            "sessionId": self.sid,
            "version": VERSION,
            "gitBranch": "main",
            "entrypoint": self.entrypoint,
            "uuid": str(uuid.uuid4()),
            "timestamp": _stamp(),
        }
        base.update(record)
        self.parent = base["uuid"]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, json.dumps(base).encode() + b"\n")
        finally:
            os.close(fd)

    def user(self, text: str, *, blocks: bool = False) -> None:
        content: Any = [{"type": "text", "text": text}] if blocks else text
        self._append({"type": "user", "message": {"role": "user", "content": content}})

    def assistant(self, text: str, message_id: str, stop_reason: str | None) -> None:
        self._append(
            {
                "type": "assistant",
                "requestId": f"req_{message_id[-12:]}",
                "message": {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-stand-in",
                    "content": [{"type": "text", "text": text}],
                    "stop_reason": stop_reason,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 3, "output_tokens": 7},
                },
            }
        )

    def reply(self, message: str) -> None:
        mid = f"msg_{uuid.uuid4().hex[:24]}"
        self.assistant(f"Looking at: {message}", mid, None)
        self.assistant(f"Done: {message}", mid, "end_turn")


def _parse(argv: list[str]) -> tuple[bool, str | None, bool, str]:
    headless, new, rest = False, False, list(argv)
    sid: str | None = None
    message: list[str] = []
    while rest:
        arg = rest.pop(0)
        if arg == "--":
            message = rest
            break
        flag, eq, value = arg.partition("=")
        if arg in ("-p", "--print"):
            headless = True
        elif eq and flag in ("--resume", "--session-id"):
            sid, new = value, flag == "--session-id"
        elif arg in ("--resume", "-r", "--session-id") and rest:
            sid, new = rest.pop(0), arg == "--session-id"
    return headless, sid, new, " ".join(message)


def main(argv: list[str]) -> int:
    claude_dir = Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude")
    log_path = os.environ.get("FAKE_CLAUDE_LOG")
    if log_path:
        with open(log_path, "a") as f:
            secrets = sorted(k for k in os.environ if k.startswith("RELAYBUS_") or "REDIS" in k)
            f.write(
                json.dumps(
                    {"argv": argv, "cwd": os.getcwd(), "pid": os.getpid(), "secretEnv": secrets}
                )
                + "\n"
            )
    headless, sid, new, message = _parse(argv)
    if sid is None:
        print("stand-in claude needs --resume or --session-id", file=sys.stderr)
        return 2
    cwd = os.getcwd()
    path = transcript_path(claude_dir, cwd, sid)
    if new and path.exists():
        print(f"Error: Session ID {sid} is already in use.", file=sys.stderr)
        return 1
    if not new and headless and not path.exists():
        print(f"No conversation found with session ID: {sid}", file=sys.stderr)
        return 1
    transcript = Transcript(path, sid, cwd, "sdk-cli" if headless else "cli")
    if headless:
        return _headless(transcript, message)
    return _interactive(transcript, claude_dir)


def _headless(transcript: Transcript, message: str) -> int:
    interrupted = False

    def on_sigint(signum: int, frame: object) -> None:
        nonlocal interrupted
        interrupted = True

    signal.signal(signal.SIGINT, on_sigint)
    transcript.user(message)
    if "FAIL" in message:
        time.sleep(0.3)
        print("API Error: 400 stand-in refusal: prompt is too long")
        return 1
    if "LONG" in message:
        mid = f"msg_{uuid.uuid4().hex[:24]}"
        transcript.assistant(f"Starting a long task: {message}", mid, None)
        deadline = time.monotonic() + 300
        while not interrupted and time.monotonic() < deadline:
            time.sleep(0.02)
        transcript.user(INTERRUPTED, blocks=True)
        return 130 if interrupted else 1
    time.sleep(float(os.environ.get("FAKE_CLAUDE_DELAY_S", "0.2")))
    transcript.reply(message)
    return 0


def _interactive(transcript: Transcript, claude_dir: Path) -> int:
    """Read keys from the terminal: Enter submits, Escape interrupts a LONG turn."""
    live = claude_dir / "sessions" / f"{os.getpid()}.json"
    live.parent.mkdir(parents=True, exist_ok=True)
    live.write_text(
        json.dumps(
            {
                "pid": os.getpid(),
                "sessionId": transcript.sid,
                "cwd": transcript.cwd,
                "startedAt": int(time.time() * 1000),
                "kind": "interactive",
            }
        )
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGHUP, lambda *_: sys.exit(0))
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)
    buffer, working, pasting = "", False, False
    try:
        sys.stdout.write("\x1b[?2004hstand-in claude ready\r\n")  # ask for bracketed paste
        sys.stdout.flush()
        while True:
            ready, _, _ = select.select([fd], [], [], 1.0)
            if not ready:
                continue
            data = os.read(fd, 4096).decode(errors="replace")
            if not data:
                return 0
            data = data.replace(PASTE_START, "\x00").replace(PASTE_END, "\x01")
            for ch in data:
                if ch in "\x00\x01":
                    pasting = ch == "\x00"
                elif pasting:
                    buffer += ch
                elif ch == "\x1b":
                    if working:
                        transcript.user(INTERRUPTED, blocks=True)
                        working = False
                    buffer = ""
                elif ch in "\r\n":
                    if buffer.strip():
                        transcript.user(buffer)
                        if "LONG" in buffer:
                            working = True
                        else:
                            transcript.reply(buffer)
                    buffer = ""
                elif ch.isprintable():
                    buffer += ch
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        live.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
