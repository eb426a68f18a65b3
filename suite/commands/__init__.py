"""CLI subcommands. Each module defines ``register(subparsers)``; ``suite.cli`` finds them."""
