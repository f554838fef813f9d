"""relaybus shared package: settings, key layout, Lua append, wire encoding, projection."""

__version__ = "0.1.0"
