"""Default MLflow run names: what ran, on what, and which config, at a glance.

``<task> <model>/<embedding> <dataset> <hash>``, e.g. ``accuracy dlrm/qr criteo-synth
1a2b3c4d``, with `` seed N`` for one seed of a multi-seed run and `` seeds 1,2,3`` for
its parent. The hash is the first :data:`SHORT_HASH` digits of the config hash (for a
multi-seed run and its seeds, the seedless hash they share), so two configs that differ
anywhere get different names. A user's ``tracking.run_name`` wins; the name lies outside
the config's identity and never changes its hash.
"""

from __future__ import annotations

from suite.config import RunConfig

SHORT_HASH = 8
MAX_LISTED_SEEDS = 8


def describe(config: RunConfig, config_hash: str) -> str:
    """``<task> <model>/<embedding> <dataset> <short hash>`` of ``config``."""
    return (
        f"{config.task.name} {config.model.name}/{config.embedding.name} "
        f"{config.dataset.name} {config_hash[:SHORT_HASH]}"
    )


def run_name(config: RunConfig) -> str:
    """The name of a single run: ``tracking.run_name``, else :func:`describe`."""
    return config.tracking.run_name or describe(config, config.config_hash())


def seed_run_name(config: RunConfig, seedless_hash: str, seed: int) -> str:
    """The name of seed ``seed`` of a multi-seed run of ``config``: its parent's name
    (``tracking.run_name`` or :func:`describe` with the seedless hash) and `` seed N``."""
    base = config.tracking.run_name or describe(config, seedless_hash)
    return f"{base} seed {seed}"


def parent_run_name(config: RunConfig, seedless_hash: str, seeds: list[int]) -> str:
    """The name of a multi-seed parent run: ``tracking.run_name``, else :func:`describe`
    with the seedless hash and `` seeds 1,2,3`` (first and last past eight seeds)."""
    if config.tracking.run_name:
        return config.tracking.run_name
    if len(seeds) <= MAX_LISTED_SEEDS:
        listed = ",".join(str(s) for s in seeds)
    else:
        listed = f"{seeds[0]}..{seeds[-1]} ({len(seeds)})"
    return f"{describe(config, seedless_hash)} seeds {listed}"
