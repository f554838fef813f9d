"""Helpers the tests share: real servers on free ports, processes, waits."""
