"""``python -m suite``: the ``suite`` command (what ``torchrun -m suite`` starts per rank)."""

from suite.cli import main

if __name__ == "__main__":  # not when a spawned child process re-imports this module
    raise SystemExit(main())
