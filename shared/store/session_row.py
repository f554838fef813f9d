"""The session hash ``{ns}:session:<sid>``: its field names, parsing and encoding, once.

Redis holds every value as a string; :class:`SessionRow` is the typed view a reader
parses, :class:`Field` the names a writer uses, and :func:`turn_update` the one way a
turn change becomes its ``turn_status`` log event plus the hash fields that go with it.
Absent or unreadable numbers read as 0 (ranks and the pid as ``None``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, NamedTuple

from relaybus.shared.store.appendlog import OutEvent
from relaybus.shared.wire import frames


class Field:
    """Field names of the session hash (the append script writes ``lastSeqId`` and
    ``sessionSeq`` itself)."""

    ID: Final = "id"
    HOST: Final = "host"
    CWD: Final = "cwd"
    ENTRYPOINT: Final = "entrypoint"
    TITLE: Final = "title"
    TITLE_RANK: Final = "titleRank"
    FIRST_PROMPT: Final = "firstPrompt"
    FIRST_PROMPT_RANK: Final = "firstPromptRank"
    STARTED_AT: Final = "startedAt"
    LAST_ACTIVITY: Final = "lastActivity"
    LAST_SEQ_ID: Final = "lastSeqId"
    SESSION_SEQ: Final = "sessionSeq"
    STATE: Final = "state"
    SINCE: Final = "since"
    WAITING_FOR: Final = "waitingFor"
    LIVE: Final = "live"
    ENDED: Final = "ended"
    END_REASON: Final = "endReason"
    PID: Final = "pid"
    #: "1" once it published an event a person reads; absent in hashes from before it.
    HAS_CONTENT: Final = "hasContent"
    #: "0" while the history of a session only listed was never published.
    HISTORY_LOADED: Final = "historyLoaded"
    #: The committed offset value (``end:dev:ino``) a published history ends at.
    HISTORY_END: Final = "historyEnd"
    #: Claude Code's permission mode as last written or seen (``default``, ``plan``, …).
    PERMISSION_MODE: Final = "permissionMode"


def _int(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        try:
            return int(float(text))
        except (ValueError, OverflowError):
            return None


def _flag(text: str | None) -> bool | None:
    return text == "1" if text else None


class SessionRow(NamedTuple):
    """One session hash as read from Redis (``HGETALL``); a NamedTuple, cheap to build for
    the up to 1000 sessions a ``sessions`` reply lists."""

    host: str = ""
    cwd: str = ""
    entrypoint: str = ""
    title: str | None = None
    title_rank: int | None = None
    first_prompt: str | None = None
    first_prompt_rank: int | None = None
    started_at: int = 0
    last_activity: int = 0
    last_seq_id: int = 0
    session_seq: int = 0
    state: str | None = None
    since: int = 0
    waiting_for: str | None = None
    live: bool = False
    ended: bool = False
    end_reason: str = ""
    pid: int | None = None
    has_content: bool | None = None
    history_loaded: bool | None = None
    history_end: str = ""
    permission_mode: str | None = None

    @classmethod
    def parse(cls, raw: Mapping[bytes, bytes]) -> SessionRow:
        text = {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in raw.items()}
        get = text.get
        return cls(
            host=get(Field.HOST, ""),
            cwd=get(Field.CWD, ""),
            entrypoint=get(Field.ENTRYPOINT, ""),
            title=get(Field.TITLE) or None,
            title_rank=_int(get(Field.TITLE_RANK)),
            first_prompt=get(Field.FIRST_PROMPT) or None,
            first_prompt_rank=_int(get(Field.FIRST_PROMPT_RANK)),
            started_at=_int(get(Field.STARTED_AT)) or 0,
            last_activity=_int(get(Field.LAST_ACTIVITY)) or 0,
            last_seq_id=_int(get(Field.LAST_SEQ_ID)) or 0,
            session_seq=_int(get(Field.SESSION_SEQ)) or 0,
            state=get(Field.STATE) or None,
            since=_int(get(Field.SINCE)) or 0,
            waiting_for=get(Field.WAITING_FOR) or None,
            live=get(Field.LIVE) == "1",
            ended=get(Field.ENDED) == "1",
            end_reason=get(Field.END_REASON, ""),
            pid=_int(get(Field.PID)) or None,
            has_content=_flag(get(Field.HAS_CONTENT)),
            history_loaded=_flag(get(Field.HISTORY_LOADED)),
            history_end=get(Field.HISTORY_END, ""),
            permission_mode=get(Field.PERMISSION_MODE) or None,
        )


def turn_fields(state: str, since: int, waiting_for: str | None) -> dict[str, str]:
    """The hash fields of a turn state (``waitingFor`` cleared when there is none)."""
    return {Field.STATE: state, Field.SINCE: str(since), Field.WAITING_FOR: waiting_for or ""}


def turn_update(
    sid: str, state: str, since: int, waiting_for: str | None
) -> tuple[OutEvent, dict[str, str]]:
    """A turn change: its ``turn_status`` log event and the hash fields written with it."""
    prefix = frames.turn_status(sid, state=state, since=since, waiting_for=waiting_for)
    return OutEvent(frames.TURN_STATUS, prefix), turn_fields(state, since, waiting_for)
