"""Claude Code's transcript format: records projected into typed blocks."""
