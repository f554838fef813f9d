"""The Redis layout: keys, the session row, the connection, the Lua append."""
