"""Unknown ``RELAYBUS_*`` variables: a mistyped name (``RELAYBUS_GATEWAY_PROT``) is otherwise
ignored without a word. Every command warns once per unknown name, with the closest real one.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

PREFIX = "RELAYBUS_"
#: Read by docker-compose.yml (interpolation), not by relaybus itself.
COMPOSE_NAMES = frozenset(
    {
        "RELAYBUS_UID",
        "RELAYBUS_GID",
        "RELAYBUS_IMAGE_TAG",
        "RELAYBUS_PUBLIC_PORT",
        "RELAYBUS_CERTS_DIR",
        "RELAYBUS_CERT_NAMES",
    }
)
#: Read by the test suite only (tests/support).
TEST_PREFIX = "RELAYBUS_TEST_"


def known_names(fields: Iterable[str]) -> frozenset[str]:
    """Every name relaybus or its compose file reads: one per setting field, plus compose's."""
    return frozenset(PREFIX + f.upper() for f in fields) | COMPOSE_NAMES


def unknown_warnings(names: Iterable[str], known: frozenset[str]) -> list[str]:
    """One line per unknown ``RELAYBUS_*`` name (sorted, each once), naming the closest known
    name when one is close enough."""
    out = []
    for name in sorted(set(names)):
        upper = name.upper()
        if not upper.startswith(PREFIX) or upper.startswith(TEST_PREFIX) or upper in known:
            continue
        close = difflib.get_close_matches(upper, known, n=1, cutoff=0.8)
        hint = f" (did you mean {close[0]}?)" if close else ""
        out.append(f"relaybus: unknown variable {name} is ignored{hint}")
    return out
