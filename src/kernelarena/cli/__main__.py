"""``python -m kernelarena.cli``: the command."""

from kernelarena.cli import main

main()
