"""The groups of the settings: which command takes each as a flag (``collector:`` groups by the
collector, ``gateway:`` by the gateway, ``up:`` by up alone, the rest by every command) and
the groups ``--help`` shows them in. Each setting belongs to exactly one group (checked by
tests/shared/test_cli_help.py)."""

from __future__ import annotations

GROUPS: dict[str, tuple[str, ...]] = {
    "Redis": (
        "redis_url",
        "redis_socket_timeout_s",
        "redis_health_check_interval_s",
        "redis_cluster",
        "redis_sentinels",
        "redis_sentinel_service",
        "redis_sentinel_username",
        "redis_sentinel_password",
        "namespace",
        "log_maxlen",
        "session_maxlen",
        "session_ttl_days",
        "audit_retention_days",
    ),
    "this process": ("host_id", "log_level", "log_format"),
    "collector: transcripts": (
        "claude_dir",
        "backfill_events",
        "backfill_max_age_hours",
        "turn_backstop_seconds",
        "session_idle_minutes",
        "heartbeat_ttl_s",
        "batch_max_lines",
        "max_line_bytes",
        "data_max_bytes",
        "watch_backend",
        "watch_step_ms",
        "collector_metrics_port",
        "collector_metrics_host",
    ),
    "collector: durability": ("redis_wait_replicas", "redis_wait_timeout_ms"),
    "collector: prompts and approvals": (
        "allow_prompts",
        "prompt_cwd_allow",
        "owner",
        "claude_bin",
        "claude_args",
        "approval_mode",
        "approval_timeout_seconds",
        "approval_port",
        "approval_socket",
    ),
    "gateway: listening and access": (
        "gateway_host",
        "gateway_port",
        "tokens",
        "allow_anonymous",
        "allowed_origins",
        "public_hosts",
        "gateway_id",
        "tls_cert",
        "tls_key",
    ),
    "gateway: limits": (
        "replay_depth",
        "send_queue_max",
        "max_frame_bytes",
        "rate_limit_per_s",
        "ws_compression",
        "watchers_ttl_s",
        "command_timeout_seconds",
        "send_buffer_bytes",
        "write_timeout_s",
        "header_timeout_s",
        "max_connections",
    ),
    "gateway: notifications": (
        "push_enabled",
        "push_public_url",
        "push_subject",
        "push_done_after_seconds",
        "push_claim_idle_s",
        "push_max_age_s",
        "push_ttl_s",
        "push_endpoint_allow",
        "push_rate_limit_per_min",
        "notify_urls",
    ),
    "up: HTTPS for phones": ("tls_auto", "tls_root_port"),
}
OTHER = "other settings"


def group_of(field: str) -> str:
    for title, fields in GROUPS.items():
        if field in fields:
            return title
    return OTHER


def fields_of(*titles: str) -> list[str]:
    """The settings of every group whose title starts with one of ``titles`` (the flags a
    command takes: ``fields_of("collector:")``)."""
    return [f for title, fields in GROUPS.items() if title.startswith(titles) for f in fields]


def group_rank(field: str) -> int:
    """Where ``field``'s group comes in ``--help`` (the order of ``GROUPS``, others last)."""
    title = group_of(field)
    return list(GROUPS).index(title) if title in GROUPS else len(GROUPS)
