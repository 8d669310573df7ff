"""``python -m kernelarena``: the ``kernelarena`` command."""

from kernelarena.cli import main

main()
