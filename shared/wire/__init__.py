"""Wire contracts: pure data shapes every side agrees on (no I/O)."""
