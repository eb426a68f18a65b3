"""How much a paired difference moves with the data draw (issue 68, step 1).

Every seed of a reproduction trains on the same generated criteo-synth (one teacher, one
sample), so a verdict's interval carries the seeds' spread and the test set's sampling but
not the draw of the data itself. This trains the runs of a few claims on ``--draws``
independently generated draws (``dataset.options.seed`` = 1000 + draw: teacher, train,
validation and test all drawn anew) under ``--seeds`` seeds each, every draw stored under
``OUT/draw-K/runs`` as a reproduction stores its runs (a killed measurement resumes), and
prints, per pair, the one-way random-effects split of the per-seed paired difference::

    d[k, s] = AUC(left)[k, s] - AUC(right)[k, s]   (draw k, seed s)
    MS_B = S * var_k(mean_s d)   MS_W = mean_k var_s(d)   sigma_D^2 = (MS_B - MS_W) / S

against ``s^2 / n`` (``s^2`` = MS_W, the seeds' spread within a draw, ``n`` = the judged
profile's seed count), with the F test of sigma_D^2 = 0 and a 90% interval of the ratio
(Burdick and Graybill's, from the F distribution). ``OUT/REPORT.md`` gets the table and the
command.

    python benchmarks/bench_draw_variance.py --profile quick --out results/draws/quick
    python benchmarks/bench_draw_variance.py --profile standard --out results/draws/standard \\
        --pair qr_4-hash_4 --pair fiited_9375-full --pair md_4-hash_4
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

PAIRS = {
    "qr_4-hash_4": ("qr", "qr-above-hash-4", "qr_4", "hash_4"),
    "dhe_4-full": ("dhe", "dhe-4-keeps-auc", "dhe_4", "full"),
    "fiited_9375-full": ("fiited", "fiited-9375-auc-cost", "fiited_9375", "full"),
    "md_4-hash_4": ("mixed_dim", "md-above-hash-4", "md_4", "hash_4"),
}
"""Pair name -> (paper, the claim whose runs it trains, left run, right run)."""
DRAW_SEED = 1000
"""``dataset.options.seed`` of draw k is DRAW_SEED + k: away from the default draw (0)."""
JUDGED_SEEDS = {"quick": 5, "standard": 10}
"""n of ``s^2 / n``: the seeds the profile's verdicts rest on."""
METRIC = "test_auc"


@dataclass(frozen=True)
class Split:
    """One pair's random-effects split over ``draws`` x ``seeds`` paired differences."""

    pair: str
    draws: int
    seeds: int
    mean: float
    within: float
    """MS_W: the seeds' variance of d within a draw (s^2)."""
    between: float
    """sigma_D^2: the variance of the draw's mean difference beyond the seeds' share."""
    f: float
    p: float
    n: int

    @property
    def ratio(self) -> float:
        """sigma_D^2 / (s^2 / n)."""
        return self.between / (self.within / self.n)

    def ratio_interval(self, level: float = 0.9) -> tuple[float, float]:
        """The interval of sigma_D^2 / (s^2 / n) from F = MS_B / MS_W (exact under normality)."""
        from scipy import stats

        d1, d2 = self.draws - 1, self.draws * (self.seeds - 1)
        lo_q, hi_q = stats.f.ppf([(1 + level) / 2, (1 - level) / 2], d1, d2)
        # sigma_D^2 / sigma_W^2 lies in [(F/F_hi - 1)/S, (F/F_lo - 1)/S]
        low = max(0.0, (self.f / lo_q - 1) / self.seeds) * self.n
        high = max(0.0, (self.f / hi_q - 1) / self.seeds) * self.n
        return low, high


def split(pair: str, d: np.ndarray, n: int) -> Split:
    """The split of ``d [draws, seeds]`` (see the module docstring)."""
    from scipy import stats

    k, s = d.shape
    ms_w = float(d.var(axis=1, ddof=1).mean())
    ms_b = float(s * d.mean(axis=1).var(ddof=1))
    f = ms_b / ms_w if ms_w > 0 else math.inf
    p = float(stats.f.sf(f, k - 1, k * (s - 1)))
    return Split(pair, k, s, float(d.mean()), ms_w, max(0.0, (ms_b - ms_w) / s), f, p, n)


def differences(
    out: Path, profile: str, pair: str, draws: int, seeds: list[int], workers: int = 1
) -> np.ndarray:
    """``[draws, seeds]`` paired differences of the pair, training what is not stored."""
    from suite.reproduce.plan import build_plan
    from suite.reproduce.runner import reproduce

    paper, claim, left, right = PAIRS[pair]
    rows = []
    for k in range(draws):
        plan = build_plan(
            profile, [paper], [claim], {"dataset": {"options": {"seed": DRAW_SEED + k}}}
        )
        jobs = [
            j
            for j in plan.jobs
            if j.seed in seeds and j.key in {plan.where[(paper, left)], plan.where[(paper, right)]}
        ]
        plan = replace(plan, seeds=seeds, jobs=jobs)
        print(f"{pair}: draw {k + 1}/{draws}", file=sys.stderr, flush=True)
        done = reproduce(plan, out / f"draw-{k}", workers=workers, progress=False)
        (outcome,) = done.papers
        runs = outcome.runs
        rows.append(
            [runs[left].per_seed[s][METRIC] - runs[right].per_seed[s][METRIC] for s in seeds]
        )
    return np.array(rows, dtype=np.float64)


def table(splits: list[Split]) -> str:
    head = (
        "| pair | draws x seeds | mean d | s² (within) | σ_D² (between) | σ_D² / (s²/n) "
        "[90%] | F test p |\n|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for s in splits:
        low, high = s.ratio_interval()
        lines.append(
            f"| {s.pair} | {s.draws} x {s.seeds} | {s.mean:+.5f} | {s.within:.3g} | "
            f"{s.between:.3g} | {s.ratio:.2f} [{low:.2f}, {high:.2f}] (n={s.n}) | {s.p:.3g} |"
        )
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=sorted(JUDGED_SEEDS), default="quick")
    parser.add_argument("--out", type=Path, required=True, help="where each draw's runs live")
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1, help="jobs trained at once")
    parser.add_argument(
        "--pair", action="append", choices=sorted(PAIRS), help="default: all four (repeatable)"
    )
    args = parser.parse_args(argv)
    if args.draws < 2 or args.seeds < 2:
        parser.error("--draws and --seeds: at least 2 each (a variance needs two)")
    pairs = args.pair or list(PAIRS)
    seeds = list(range(args.seeds))
    n = JUDGED_SEEDS[args.profile]
    splits = [
        split(p, differences(args.out, args.profile, p, args.draws, seeds, args.workers), n)
        for p in pairs
    ]
    text = table(splits)
    given = list(argv or sys.argv[1:])  # the command, less --workers (no figure depends on it)
    for at, arg in reversed(list(enumerate(given))):
        if arg.startswith("--workers="):
            del given[at]
        elif arg == "--workers":
            del given[at : at + 2]
    command = shlex.join(["python", "benchmarks/bench_draw_variance.py", *given])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "REPORT.md").write_text(
        f"# Between-draw variance ({args.profile})\n\n`{command}`\n\n"
        f"Each draw is criteo-synth generated with `dataset.options.seed` = {DRAW_SEED} + k "
        f"(teacher and sample); n = {n}, the seeds the {args.profile} verdicts rest on.\n\n" + text
    )
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
