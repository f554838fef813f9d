"""What reaches a socket: connections, the log fan-out, replay and history reads, frame writing.

Imports nothing from ``requests`` or ``web`` (an import-linter contract).
"""
