"""One typed settings object for every relaybus role.

Resolved once at start-up (argument → ``RELAYBUS_*`` environment → ``.env`` → default)
and passed in; nothing reads the environment at import time. Each field carries its
description (the CLI's ``--help`` is generated from them; a test holds docs/configuration.md
to them), bounds and validator.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from relaybus.shared.wire.ids import HOST_ID_PATTERN


class SettingsError(Exception):
    """A configuration value is invalid; the message is one line naming the variable."""


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_REDIS_SCHEMES = ("redis", "rediss", "unix")
#: Never echoed in an error message: they hold passwords and token secrets.
SECRET_FIELDS = frozenset({"redis_url", "tokens", "redis_sentinel_password", "notify_urls"})


def check_redis_url(url: str) -> None:
    """Raise ``ValueError`` (one line, no password) unless ``url`` is a usable Redis URL.

    The syntax only: whether the server knows the password or has the database is
    learnt by connecting (``relaybus.shared.store.connection.probe``).
    """
    parts = urlsplit(url)
    if parts.scheme not in _REDIS_SCHEMES:
        raise ValueError(
            "must start with redis://, rediss:// or unix:// (e.g. redis://:password@host:6379/0)"
        )
    if parts.scheme == "unix":
        if not parts.path:
            raise ValueError("unix:// needs a socket path (unix:///run/redis.sock?db=0)")
        return
    if not parts.hostname:
        raise ValueError("names no host (redis://:password@host:6379/0)")
    try:
        parts.hostname.encode("idna")
    except UnicodeError:
        raise ValueError(f"has an invalid host name {parts.hostname!r}") from None
    try:
        port = parts.port
    except ValueError:
        raise ValueError("has a port that is not a number from 1 to 65535") from None
    if port == 0:
        raise ValueError("has a port that is not a number from 1 to 65535")
    db = parts.path.strip("/")
    if db and not db.isdigit():
        raise ValueError(f"ends in /{db}: the database must be a number (/0)")


def parse_sentinels(text: str) -> list[tuple[str, int]]:
    """``host:port,host:port`` → address pairs (``[::1]:26379`` for IPv6); ``ValueError``
    (one line) on a malformed entry. An empty text means no Sentinel."""
    found: list[tuple[str, int]] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{item!r} is not host:port (e.g. 10.0.0.5:26379,10.0.0.6:26379)")
        found.append((host, int(port)))
    return found


def _default_claude_dir() -> Path:
    env = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(env) if env else Path.home() / ".claude"


class Settings(BaseSettings):
    """Every ``RELAYBUS_*`` variable. See docs/configuration.md for the full table."""

    model_config = SettingsConfigDict(
        env_prefix="RELAYBUS_",
        env_file=".env",
        extra="ignore",
        frozen=True,
        # inf, nan and 1e400 are not durations or sizes; they crashed later (OverflowError).
        allow_inf_nan=False,
    )

    # --- shared -----------------------------------------------------------------------
    redis_url: SecretStr = Field(
        default=SecretStr(""),
        description="Redis/Valkey URL (redis:// or rediss://, password in the URL); required "
        "by collector and gateway (`relaybus up` without it starts its own embedded server)",
    )
    redis_sentinels: str = Field(
        default="",
        description="Sentinel addresses host:port,host:port,...; when set, the primary is the "
        "one they name for the service (RELAYBUS_REDIS_URL then gives only password, db, TLS)",
    )
    redis_cluster: bool = Field(
        default=False,
        description="RELAYBUS_REDIS_URL names a seed node of a Redis Cluster: follow the cluster's "
        "slots and its MOVED/ASK redirections (not with Sentinels, a database other than 0, or WAIT)",
    )
    redis_sentinel_service: str = Field(
        default="relaybus",
        pattern=r"^[A-Za-z0-9_.-]{1,128}$",
        description="the Sentinel service (master group) name",
    )
    redis_sentinel_username: str = Field(
        default="", description="user for the Sentinels themselves (ACL; empty = default user)"
    )
    redis_sentinel_password: SecretStr = Field(
        default=SecretStr(""),
        description="password of the Sentinels themselves (their requirepass; empty = none)",
    )
    redis_wait_replicas: int = Field(
        default=0,
        ge=0,
        le=100,
        description="replicas that must acknowledge each append (Redis WAIT) before the collector moves on; 0 = no wait",
    )
    redis_wait_timeout_ms: int = Field(
        default=1000,
        ge=1,
        le=600_000,
        description="longest WAIT for those replicas; a batch not replicated in time is counted and logged",
    )
    namespace: str = Field(
        default="relaybus",
        pattern=r"^[A-Za-z0-9_.-]{1,64}$",
        description="key namespace; every key is {<ns>}:... (one team/tenant)",
    )
    host_id: str = Field(
        default_factory=socket.gethostname,
        pattern=HOST_ID_PATTERN,
        description="this machine's id in the bus (default: hostname)",
    )
    audit_retention_days: float = Field(
        default=90,
        gt=0,
        le=3650,
        description="how long the audit trail ({ns}:audit) keeps an action",
    )
    log_level: str = Field(default="INFO", description="DEBUG, INFO, WARNING or ERROR")
    log_format: Literal["auto", "text", "json"] = Field(
        default="auto",
        description="log lines as text or JSON; auto: text on a terminal, JSON otherwise",
    )
    redis_socket_timeout_s: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="Redis connect/read timeout; a dead connection is noticed within it",
    )
    redis_health_check_interval_s: float = Field(
        default=2.0,
        ge=0,
        le=3600,
        description="PING idle Redis connections older than this before reuse",
    )

    # --- log layout -------------------------------------------------------------------
    log_maxlen: int = Field(
        default=100_000,
        ge=100,
        le=1_000_000_000,
        description="approximate length cap of the global log stream",
    )
    session_maxlen: int = Field(
        default=2000,
        ge=10,
        le=100_000_000,
        description="approximate length cap of each session's event stream",
    )
    session_ttl_days: float = Field(
        default=7,
        gt=0,
        le=3650,
        description="session streams and hashes expire after this long without activity",
    )

    # --- collector --------------------------------------------------------------------
    claude_dir: Path = Field(
        default_factory=_default_claude_dir,
        description="Claude Code config dir holding projects/ and sessions/ (default $CLAUDE_CONFIG_DIR or ~/.claude)",
    )
    backfill_events: int = Field(
        default=200,
        ge=0,
        le=1_000_000,
        description="events published from a recent file seen for the first time",
    )
    backfill_max_age_hours: float = Field(
        default=24,
        ge=0,
        le=87_600,
        description="files modified longer ago are registered, not replayed",
    )
    turn_backstop_seconds: float = Field(
        default=120,
        gt=0,
        le=604_800,
        description="a working turn with no activity for this long becomes idle",
    )
    session_idle_minutes: float = Field(
        default=30,
        gt=0,
        le=525_600,
        description="a session without live process ends after this long without activity",
    )
    collector_metrics_port: int = Field(
        default=9464,
        ge=0,
        le=65535,
        description="Prometheus /metrics port of the collector (0 = off)",
    )
    collector_metrics_host: str = Field(
        default="0.0.0.0",
        description="address the collector's /metrics listens on (relaybus up: 127.0.0.1 unless set)",
    )
    heartbeat_ttl_s: int = Field(
        default=15,
        ge=3,
        le=3600,
        description="TTL of the collector's liveness key; refreshed every third of it",
    )
    batch_max_lines: int = Field(
        default=500, ge=1, le=100_000, description="most lines appended in one atomic Redis call"
    )
    max_line_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=4096,
        le=1024 * 1024 * 1024,
        description="lines above this are published as a size stand-in, never read whole",
    )
    data_max_bytes: int = Field(
        default=64 * 1024,
        ge=1024,
        le=64 * 1024 * 1024,
        description="raw line sent as event.data up to this size (a stand-in above)",
    )
    watch_backend: Literal["auto", "inotify", "watchfiles"] = Field(
        default="auto",
        description="file watching: inotify on the event loop (Linux), watchfiles, or auto "
        "(inotify where it works, else watchfiles)",
    )
    watch_step_ms: int = Field(
        default=1,
        ge=1,
        le=1000,
        description="watchfiles polling step (watchfiles backend only); small values give "
        "millisecond wake-ups",
    )

    # --- gateway ----------------------------------------------------------------------
    gateway_host: str = Field(default="0.0.0.0", description="gateway listen address")
    gateway_port: int = Field(default=8080, ge=0, le=65535, description="gateway listen port")
    tokens: SecretStr = Field(
        default=SecretStr(""),
        description="comma-separated client tokens: 'secret' (full) or 'secret:read' (read-only)",
    )
    allow_anonymous: bool = Field(
        default=False,
        description="serve clients without a token (refused at start otherwise when no tokens; "
        "without tokens only on a loopback RELAYBUS_GATEWAY_HOST)",
    )
    replay_depth: int = Field(
        default=200,
        ge=0,
        le=10_000,
        description="events replayed on watch_session without sinceSeqId",
    )
    send_queue_max: int = Field(
        default=1024,
        ge=8,
        le=1_000_000,
        description="frames queued per connection before a slow client is disconnected",
    )
    max_frame_bytes: int = Field(
        default=64 * 1024,
        ge=1024,
        le=64 * 1024 * 1024,
        description="largest accepted client frame; larger frames close the connection",
    )
    rate_limit_per_s: float = Field(
        default=50,
        gt=0,
        le=1_000_000,
        description="client frames per second allowed (burst twice that) before closing",
    )
    ws_compression: bool = Field(
        default=False,
        description="must stay false: permessage-deflate is not offered (every client is sent the same uncompressed frames)",
    )
    gateway_id: str = Field(
        default="", description="stable gateway id (default: random per process)"
    )
    send_buffer_bytes: int = Field(
        default=4 * 1024 * 1024,
        ge=64 * 1024,
        description="bytes queued per connection (live, replay and resume frames) before a slow client is disconnected",
    )
    write_timeout_s: float = Field(
        default=30,
        gt=0,
        description="a connection whose socket takes no data for this long is closed (4008)",
    )
    header_timeout_s: float = Field(
        default=10,
        gt=0,
        description="an HTTP connection must send its complete request headers within this time",
    )
    max_connections: int = Field(
        default=0,
        ge=0,
        description="open HTTP/WebSocket connections served at once (0 = from the open-file limit)",
    )
    allowed_origins: str = Field(
        default="",
        description="comma-separated Origins allowed on /ws besides the gateway's own (browsers only)",
    )
    public_hosts: str = Field(
        default="",
        max_length=4096,
        description="comma-separated host names the gateway is reached under (Host header) "
        "besides its IP addresses, localhost and this machine's name; others get 403",
    )
    tls_cert: str = Field(
        default="",
        max_length=4096,
        description="PEM certificate (chain) file: the gateway serves HTTPS with it and "
        "RELAYBUS_TLS_KEY (a name you own, a tailnet's certificate); relaybus up then makes none",
    )
    tls_key: str = Field(
        default="",
        max_length=4096,
        validate_default=True,
        description="PEM private key file of RELAYBUS_TLS_CERT",
    )
    tls_auto: bool = Field(
        default=True,
        description="relaybus up: make a private root CA once and a certificate for this "
        "machine's addresses, and serve HTTPS on the phone port (false: plain http)",
    )
    tls_root_port: int = Field(
        default=8081,
        ge=0,
        le=65535,
        description="relaybus up with its own root: plain-http page with the root certificate "
        "and install steps for phones (0: off)",
    )

    watchers_ttl_s: int = Field(
        default=15,
        ge=3,
        le=3600,
        description="a gateway's count of clients watching a session holds approvals this long after its last refresh (refreshed every third)",
    )

    # --- commands ---------------------------------------------------------------------
    command_timeout_seconds: float = Field(
        default=15,
        gt=0,
        le=86_400,
        description="a routed command without a reply in this time gets error timeout",
    )
    allow_prompts: bool = Field(
        default=False, description="let clients run prompts/interrupts on this machine's sessions"
    )
    prompt_cwd_allow: str = Field(
        default="", description="comma-separated path prefixes where commands may run (empty = any)"
    )
    owner: str = Field(
        default="",
        pattern=r"^([A-Za-z0-9_.@-]{1,64})?$",
        description="the member this machine belongs to: `relaybus token add NAME` scopes NAME to it",
    )
    claude_bin: str = Field(default="claude", description="the Claude Code CLI executable")
    claude_args: str = Field(
        default="", description="extra CLI arguments for headless prompts (e.g. a permission mode)"
    )
    approval_mode: Literal["watched", "always"] = Field(
        default="watched",
        description="'watched' holds a permission request only while a client watches; 'always' holds regardless",
    )
    approval_timeout_seconds: float = Field(
        default=120,
        gt=0,
        le=86_400,
        description="a permission request without a decision in this time falls through",
    )
    approval_port: int = Field(
        default=9465,
        ge=0,
        le=65535,
        description="names the collector's approval socket <runtime dir>/approval-<port>.sock for the Claude Code hook (0 = off)",
    )
    approval_socket: Path | None = Field(
        default=None,
        description="path of the approval socket instead (its directory must be private: 0700, yours)",
    )

    # --- push (gateway) ------------------------------------------------------------------
    push_enabled: bool = Field(
        default=True,
        description="push to subscribed devices (Web Push) and RELAYBUS_NOTIFY_URLS from this gateway",
    )
    push_public_url: str = Field(
        default="",
        description="the web client's public URL (https://host/), for the links in Apprise messages",
    )
    push_subject: str = Field(
        default="mailto:relaybus@localhost",
        description="VAPID 'sub' claim the push services may contact: mailto:you@example.com or an https URL",
    )
    push_done_after_seconds: float = Field(
        default=30,
        ge=0,
        le=86_400,
        description="a turn that ran at least this long is pushed as 'Done' when it ends",
    )
    push_claim_idle_s: float = Field(
        default=10,
        gt=0,
        le=3600,
        description="an event a gateway took but did not finish in this time is taken over by another (XAUTOCLAIM)",
    )
    push_max_age_s: float = Field(
        default=300,
        gt=0,
        le=86_400,
        description="events older than this when a gateway reaches them are not pushed (dropped: stale)",
    )
    push_ttl_s: int = Field(
        default=86_400,
        ge=0,
        le=2_419_200,
        description="how long a push service keeps an undelivered notification (a permission request: until it expires)",
    )
    push_endpoint_allow: str = Field(
        default="",
        max_length=4096,
        description="comma-separated hosts or host:port a device's push endpoint may name besides the browsers' push services (https only, public addresses): listed ones may be http, loopback or private (a local push service)",
    )
    push_rate_limit_per_min: int = Field(
        default=30,
        ge=1,
        le=6000,
        description="/push/subscription requests per token, and /push/decide requests per client address, a minute on each gateway (bursts up to this many); more get 429",
    )
    notify_urls: SecretStr = Field(
        default=SecretStr(""),
        description="Apprise URLs (ntfy://, tgram://, slack://, json://, mailto://, …), separated by spaces or commas",
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _known_log_level(cls, v: Any) -> Any:
        if isinstance(v, str) and v.strip().upper() in LOG_LEVELS:
            return v.strip().upper()
        raise ValueError(f"not one of {', '.join(LOG_LEVELS)}")

    @field_validator("redis_url", mode="before")
    @classmethod
    def _parsable_redis_url(cls, v: Any) -> Any:
        text = v.get_secret_value() if isinstance(v, SecretStr) else v
        if isinstance(text, str) and text:  # empty: not set (see ``require_redis_url``)
            check_redis_url(text)
        return v

    @field_validator("ws_compression")
    @classmethod
    def _no_deflate(cls, v: bool) -> bool:
        if v:
            raise ValueError(
                "permessage-deflate is no longer offered: /ws sends every client the same "
                "uncompressed frames (compress at a proxy if you must); unset it"
            )
        return v

    @field_validator("tls_key")
    @classmethod
    def _key_with_cert(cls, v: str, info: ValidationInfo) -> str:
        if bool(v) != bool(info.data.get("tls_cert")):
            raise ValueError("set together with RELAYBUS_TLS_CERT (a certificate and its key)")
        return v

    def require_redis_url(self) -> None:
        """Raise :class:`SettingsError` unless a Redis URL is set: nothing falls back to a
        Redis of this machine's own (its database 0 is someone else's)."""
        if not self.redis_url.get_secret_value():
            raise SettingsError(
                "RELAYBUS_REDIS_URL is not set (e.g. redis://:password@host:6379/0); "
                "`relaybus up` starts its own embedded server without it"
            )

    @field_validator("redis_sentinels")
    @classmethod
    def _parsable_sentinels(cls, v: str) -> str:
        parse_sentinels(v)
        return v

    @field_validator("redis_cluster")
    @classmethod
    def _cluster_alone(cls, v: bool, info: ValidationInfo) -> bool:
        """A cluster has no Sentinels, one database and no WAIT in the collector's pipeline."""
        if not v:
            return v
        if info.data.get("redis_sentinels"):
            raise ValueError("cannot be combined with RELAYBUS_REDIS_SENTINELS (unset one)")
        url = info.data.get("redis_url")
        parts = urlsplit(url.get_secret_value()) if isinstance(url, SecretStr) else None
        if parts is not None and parts.scheme == "unix":
            raise ValueError("needs a redis:// or rediss:// seed node, not a unix socket")
        if parts is not None and parts.path.strip("/") not in ("", "0"):
            raise ValueError("needs database 0 in RELAYBUS_REDIS_URL (a cluster has no other)")
        return v

    @field_validator("redis_wait_replicas")
    @classmethod
    def _no_wait_on_cluster(cls, v: int, info: ValidationInfo) -> int:
        """WAIT must follow the append on its connection; a cluster pipeline sends it elsewhere."""
        if v and info.data.get("redis_cluster"):
            raise ValueError("is not supported with RELAYBUS_REDIS_CLUSTER (set it to 0)")
        return v

    @field_validator("push_endpoint_allow")
    @classmethod
    def _parsable_endpoint_allow(cls, v: str) -> str:
        for entry in v.split(","):
            parts = urlsplit(f"//{entry.strip()}")
            try:
                parts.port  # noqa: B018 - parsing is the check
            except ValueError:
                raise ValueError(f"{entry.strip()!r} has an invalid port") from None
            if entry.strip() and not parts.hostname:
                raise ValueError(f"{entry.strip()!r} names no host (host or host:port)")
        return v

    @field_validator("claude_dir", mode="before")
    @classmethod
    def _expand_claude_dir(cls, v: Any) -> Any:
        return Path(v).expanduser() if isinstance(v, str) and v else v

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        """The Sentinels to ask for the primary (empty: connect to RELAYBUS_REDIS_URL)."""
        return parse_sentinels(self.redis_sentinels)

    @property
    def session_ttl_s(self) -> int:
        return int(self.session_ttl_days * 86400)


def load_settings(**overrides: Any) -> Settings:
    """Build the settings, turning a validation error into a one-line ``SettingsError``."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][0]) if err["loc"] else "?"
        msg = str(err["msg"]).removeprefix("Value error, ")
        got = "" if field in SECRET_FIELDS else f" (got {err.get('input')!r})"
        raise SettingsError(f"invalid RELAYBUS_{field.upper()}: {msg}{got}") from None
