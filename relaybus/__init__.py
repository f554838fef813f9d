"""Composition: the ``relaybus`` CLI and ``relaybus up``. It sits on top of ``collector``,
``gateway`` and ``shared`` and is imported by nothing but the ``__main__`` shims."""
