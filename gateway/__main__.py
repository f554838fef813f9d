import sys

from shared.cli import run_command

sys.exit(run_command("gateway", sys.argv[1:]))
