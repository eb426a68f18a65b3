"""CLI subcommands. Each module defines ``register(subparsers)``; ``suite.cli`` finds them
(a module without one, such as ``regime`` or ``tune``, holds a handler that another
command dispatches to: ``suite reproduce --profile regime``, ``suite reproduce --tune``).

Building the parser imports every module here, so a module imports only argparse and
light helpers at its top; torch, fbgemm, MLflow, Optuna, pandas and even the config
(pydantic) load inside the handler that needs them (``suite --help`` stays well under a
second; ``tests/test_catalog.py`` checks it).
"""
