"""One typed settings object for every relaybus role.

Resolved once at start-up (argument → ``RELAYBUS_*`` environment → ``.env`` → default)
and passed in; nothing reads the environment at import time.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class SettingsError(Exception):
    """A configuration value is invalid; the message is one line naming the variable."""


def _default_claude_dir() -> Path:
    env = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(env) if env else Path.home() / ".claude"


class Settings(BaseSettings):
    """Every ``RELAYBUS_*`` variable. See docs/configuration.md for the full table."""

    model_config = SettingsConfigDict(
        env_prefix="RELAYBUS_", env_file=".env", extra="ignore", frozen=True
    )

    # --- shared -----------------------------------------------------------------------
    redis_url: SecretStr = SecretStr("redis://127.0.0.1:6379/0")
    namespace: str = Field(default="relaybus", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    host_id: str = Field(default_factory=socket.gethostname, pattern=r"^[^\s{}:]{1,128}$")
    log_level: str = "INFO"
    redis_socket_timeout_s: float = Field(default=5.0, gt=0)
    redis_health_check_interval_s: float = Field(default=2.0, ge=0)

    # --- log layout -------------------------------------------------------------------
    log_maxlen: int = Field(default=100_000, ge=100)
    session_maxlen: int = Field(default=2000, ge=10)
    session_ttl_days: float = Field(default=7, gt=0)

    # --- collector --------------------------------------------------------------------
    claude_dir: Path = Field(default_factory=_default_claude_dir)
    backfill_events: int = Field(default=200, ge=0)
    backfill_max_age_hours: float = Field(default=24, ge=0)
    turn_backstop_seconds: float = Field(default=120, gt=0)
    session_idle_minutes: float = Field(default=30, gt=0)
    collector_metrics_port: int = Field(default=9464, ge=0, le=65535)
    heartbeat_ttl_s: int = Field(default=15, ge=3)
    batch_max_lines: int = Field(default=500, ge=1)
    max_line_bytes: int = Field(default=8 * 1024 * 1024, ge=4096)
    data_max_bytes: int = Field(default=64 * 1024, ge=1024)
    watch_step_ms: int = Field(default=1, ge=1, le=1000)

    # --- gateway ----------------------------------------------------------------------
    gateway_host: str = "0.0.0.0"
    gateway_port: int = Field(default=8080, ge=0, le=65535)
    tokens: SecretStr = SecretStr("")
    allow_anonymous: bool = False
    replay_depth: int = Field(default=200, ge=0, le=10_000)
    send_queue_max: int = Field(default=1024, ge=8)
    max_frame_bytes: int = Field(default=64 * 1024, ge=1024)
    rate_limit_per_s: float = Field(default=50, gt=0)
    ws_compression: bool = False
    gateway_id: str = ""

    # --- commands ---------------------------------------------------------------------
    command_timeout_seconds: float = Field(default=15, gt=0)
    allow_prompts: bool = False
    prompt_cwd_allow: str = ""
    claude_bin: str = "claude"
    claude_args: str = ""
    approval_mode: Literal["watched", "always"] = "watched"
    approval_timeout_seconds: float = Field(default=120, gt=0)

    @field_validator("claude_dir", mode="before")
    @classmethod
    def _expand_claude_dir(cls, v: Any) -> Any:
        return Path(v).expanduser() if isinstance(v, str) and v else v

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
        raise SettingsError(
            f"invalid RELAYBUS_{field.upper()}: {err['msg']} (got {err.get('input')!r})"
        ) from None
