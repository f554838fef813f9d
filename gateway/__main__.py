import sys

from relaybus.cli import run_command

sys.exit(run_command("gateway", sys.argv[1:]))
