"""The leaderboard: validated submission files -> Markdown and HTML tables.

A submission (:mod:`suite.leaderboard.schema`) summarises one config run with at least
three seeds. ``suite submit`` builds one from MLflow runs or result JSON files
(:mod:`suite.leaderboard.submit`); ``suite leaderboard validate`` checks every file
(:mod:`suite.leaderboard.validate`), ``verify`` re-runs a recorded seed
(:mod:`suite.leaderboard.verify`; ``--record`` notes an agreeing re-run in
``verifications.yaml``, :mod:`suite.leaderboard.verified`) and ``render`` writes
``leaderboard/README.md`` and ``leaderboard/index.html`` (:mod:`suite.leaderboard.render`:
boards ranked in :mod:`~suite.leaderboard.ranking`, their rows in
:mod:`~suite.leaderboard.board`, written by :mod:`~suite.leaderboard.markdown` and, from a
Jinja2 template, :mod:`~suite.leaderboard.page`).
Metric labels, units, directions and the ranking metric are the tasks' own declarations
(:mod:`suite.leaderboard.metrics`).

Submissions are untrusted text: they are read with ``json.loads`` (1 MB at most), never
executed or unpickled, and every string is escaped where it is shown.
"""

from pathlib import Path

LEADERBOARD_DIR = Path("leaderboard")
SUBMISSIONS = "submissions"
FINGERPRINTS = "fingerprints.yaml"
README = "README.md"
INDEX = "index.html"
BOARD_OPTION = "--leaderboard-dir"
"""The flag that moves the leaderboard's files, named when their disk is full."""
