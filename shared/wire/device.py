"""A short device label from a User-Agent: what the audit trail and the approval card show.

Deliberately coarse (a handful of fixed words): it names the kind of device, never a
fingerprint, and a hostile header can only ever pick one of these labels.
"""

from __future__ import annotations

#: (substring of the User-Agent, label), first match wins: iPhone before Mac (iPadOS and iOS
#: Safari also say "Mac OS X"), Android before Linux.
_LABELS = (
    ("iPhone", "iPhone"),
    ("iPad", "iPad"),
    ("Android", "Android"),
    ("CrOS", "ChromeOS"),
    ("Macintosh", "Mac"),
    ("Windows", "Windows"),
    ("Linux", "Linux"),
)
#: The label of a client that sent no recognisable User-Agent (scripts, the CLI).
OTHER = "client"
#: Longest User-Agent looked at.
_MAX_UA = 512


def device_label(user_agent: str | None) -> str:
    """``iPhone``, ``iPad``, ``Android``, ``ChromeOS``, ``Mac``, ``Windows``, ``Linux`` or ``client``."""
    text = (user_agent or "")[:_MAX_UA]
    for needle, label in _LABELS:
        if needle in text:
            return label
    return OTHER
