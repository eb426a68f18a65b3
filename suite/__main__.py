"""``python -m suite``: the ``suite`` command (what ``torchrun -m suite`` starts per rank)."""

from suite.cli import main

raise SystemExit(main())
