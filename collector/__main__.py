import sys

from shared.cli import run_command

sys.exit(run_command("collector", sys.argv[1:]))
