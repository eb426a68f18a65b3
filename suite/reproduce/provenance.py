"""What a spec's verdicts rest on besides its runs' figures: the data each seed trained on
(one draw, a draw per seed, or a real dataset) and the values its tuning chose (issue 68).
The report (``suite.reproduce.report``) shows both under each paper's run table."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from suite.data.synthetic_dataset import SyntheticDataset
from suite.errors import ConfigError
from suite.registry import DATASETS
from suite.reproduce.outcome import PaperOutcome
from suite.reproduce.spec import Tuning
from suite.reproduce.tuned import read_tuned, tuned_path

FINGERPRINT_CHARS = 12
"""Characters of a data fingerprint shown (enough to tell the draws of a report apart)."""


def _generated(name: str) -> bool:
    try:
        source = DATASETS.get(name)
    except ConfigError:
        return False
    return isinstance(source, type) and issubclass(source, SyntheticDataset)


def seed_fingerprints(outcome: PaperOutcome) -> dict[int, list[str]]:
    """Seed -> the distinct data fingerprints its stored runs trained on (sorted)."""
    seen: dict[int, set[str]] = defaultdict(set)
    for rec in outcome.runs.values():
        for seed, result in rec.results.items():
            if result.data_fingerprint:
                seen[seed].add(result.data_fingerprint)
    return {seed: sorted(prints) for seed, prints in sorted(seen.items())}


def data_line(outcome: PaperOutcome) -> str:
    """One sentence: which data the seeds trained on and so which noise the intervals
    carry; with a draw per seed, each seed's fingerprint."""
    runs = list(outcome.runs.values())
    if not runs:
        return ""
    dataset = runs[0].config.dataset
    prints = seed_fingerprints(outcome)
    distinct = sorted({p for ps in prints.values() for p in ps})
    short = ", ".join(f"`{p[:FINGERPRINT_CHARS]}`" for p in distinct) or "none stored"
    if not _generated(dataset.name):
        return (
            f"Data: one dataset ({dataset.name}, fingerprint {short}) for every seed: the "
            "intervals carry the seeds' spread and, for test AUCs, the test set's sampling "
            "noise (DeLong)."
        )
    if dataset.options.get("draw") == "per_seed":
        each = ", ".join(
            f"{seed} `{'`/`'.join(p[:FINGERPRINT_CHARS] for p in ps)}`"
            for seed, ps in prints.items()
        )
        mixed = [str(seed) for seed, ps in prints.items() if len(ps) > 1]
        unpaired = f" (seeds {', '.join(mixed)}: runs of differing data)" if mixed else ""
        return (
            f"Data: each seed its own draw of {dataset.name} (teacher and sample, "
            "`draw: per_seed`), shared by the methods of that seed, so the seeds' spread "
            "carries the data draw's variance and the test set's sampling noise (each seed "
            "scores its own test set: the seeds share no test-set variance, and each DeLong "
            f"p is its seed's own). Fingerprints by seed: {each}{unpaired}."
        )
    return (
        f"Data: one draw of {dataset.name} for every seed (fingerprint {short}): the "
        "intervals carry the seeds' spread and the test set's noise, not the draw's, which "
        "at the standard's scale was measured at 16-72x the seeds' s²/n "
        "(benchmarks/README.md, 'The ground')."
    )


def tuning_source(outcome: PaperOutcome) -> tuple[str, Tuning] | None:
    """The profile whose tuned values the outcome's runs train with, and its tuning block
    (a ``like`` profile trains with its source's), or None where nothing is tuned."""
    spec = outcome.spec
    prof = spec.profiles[outcome.profile]
    name = outcome.profile if prof.tuning is not None or prof.like is None else prof.like
    tuning = spec.profiles[name].tuning
    return (name, tuning) if tuning is not None else None


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def tuning_rows(outcome: PaperOutcome) -> list[dict[str, str]]:
    """One row per tuned run of the report: the values it chose, its trials, its best
    validation AUC and the spread of its three best complete trials, and the runs that
    train with its values. Empty where the profile tunes nothing or its file is absent."""
    source = tuning_source(outcome)
    if source is None:
        return []
    profile, tuning = source
    try:
        tuned = read_tuned(outcome.spec.paper, outcome.spec.tuned_key(profile))
    except ConfigError:
        return []
    rows = []
    for run_id, entry in tuned.runs.items():
        users = [r for r in outcome.runs if tuning.source(r) == run_id]
        if not users:
            continue
        spread = entry.top3_val_auc_spread
        rows.append(
            {
                "tuned run": run_id,
                "values": ", ".join(
                    f"{key.rsplit('.', 1)[-1]}={_value(v)}" for key, v in entry.values.items()
                ),
                "trials": str(entry.trials),
                "best validation AUC": f"{entry.best_val_auc:.4f}",
                "top-3 spread": "-" if spread is None else f"{spread:.4f}",
                "trial seed": (
                    str(entry.run_seed)
                    if entry.run_seed is not None
                    else f"{outcome.spec.profiles[profile].seeds[0]} (an evaluation seed)"
                ),
                "runs trained with them": ", ".join(users),
            }
        )
    return rows


def tuning_intro(outcome: PaperOutcome) -> str:
    """The sentence above the tuning table: where the values come from."""
    source = tuning_source(outcome)
    assert source is not None
    profile, tuning = source
    start = f", TPE's first {tuning.startup_trials} random" if tuning.startup_trials else ""
    pruned = ", median pruning on the validations" if tuning.pruning else ""
    return (
        f"Tuned values (`{tuned_path(outcome.spec.paper, outcome.spec.tuned_key(profile)).name}` in "
        f"suite/reproductions/tuned): each tuned run's own Optuna study of {tuning.n_trials} "
        f"trials{start}{pruned}; "
        "top-3 spread is the max - min validation AUC of its three best complete trials "
        "(how flat the top of the search was; '-' where fewer than three completed or the study predates the figure)."
    )
