import sys

from relaybus.cli import run_command

sys.exit(run_command("collector", sys.argv[1:]))
