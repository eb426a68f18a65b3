"""Refit criteo-synth's Kaggle-shaped tail (``regime: kaggle``) from the real Criteo sample:
``python benchmarks/fit_kaggle_tail.py [--raw ../shared/data/criteo/train.txt]``.

The sample (the first 8,000 rows of Kaggle's ``train.txt``; its ``dlrm`` train split,
6,858 rows, is what results/characterize/REPORT.md characterizes) is prepared where it is,
never copied. Each feature's exponent is the Zipf exponent over its REAL Kaggle vocabulary
(``CRITEO_CARDINALITIES``) whose expected distinct ids in 6,858 draws equals the sample's
(or, where the sample saw every value, whose top id's share equals the sample's):
``suite.data.teacher.fit_zipf``. Prints the fitted exponents (paste them into
``CRITEO_KAGGLE_ZIPF`` in suite/datasets/criteo.py), then the check: the same rows drawn
like the sample (real vocabularies, ids re-counted) beside the sample, with the
``characterize`` task's own Zipf exponent and hottest-1% share. About 1-2 minutes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from suite.config import build_config  # noqa: E402
from suite.data.access import AccessStream, hot_row_shares, zipf_exponent  # noqa: E402
from suite.data.source import get_prepared  # noqa: E402
from suite.data.teacher import draw_like_a_sample, fit_zipf  # noqa: E402
from suite.datasets.criteo import CRITEO_CARDINALITIES, CRITEO_KAGGLE_ZIPF  # noqa: E402


def sample_train_split(raw: Path) -> tuple[np.ndarray, list[int]]:
    """The sample's ``dlrm`` train split, ``sparse [N, 26]``, and its vocabulary sizes
    (prepared in the user's cache)."""
    spec = build_config(
        components={"dataset": "criteo-kaggle"},
        values={"dataset.raw": str(raw), "dataset.protocol": "dlrm"},
    ).dataset
    data = get_prepared(spec, progress=False)
    return np.asarray(data.split("train").sparse), list(data.schema.cardinalities)


def fit(sparse: np.ndarray) -> list[float]:
    """One exponent per feature of ``sparse [N, F]`` (see the module docstring)."""
    rows = sparse.shape[0]
    exponents = []
    for f, real in enumerate(CRITEO_CARDINALITIES):
        _, counts = np.unique(sparse[:, f], return_counts=True)
        top = float(counts.max() / rows)
        exponents.append(round(fit_zipf(real, rows, int(counts.shape[0]), top), 3))
    return exponents


def skew(sparse: np.ndarray, cards: list[int]) -> tuple[float, float, float]:
    """Embedding rows, the Zipf exponent and the hottest 1% rows' share of the lookups."""
    stream = AccessStream.from_sparse(sparse, cards)
    exponent, _ = zipf_exponent(stream.keys)
    hot = hot_row_shares(stream.keys, stream.num_rows, [0.01])["0.01"]
    return float(stream.num_rows), exponent, hot


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = ROOT.parent / "shared" / "data" / "criteo" / "train.txt"
    parser.add_argument("--raw", type=Path, default=default, help="the Criteo sample")
    args = parser.parse_args()
    if not args.raw.is_file():
        print(f"--raw: {args.raw} is absent; the recorded exponents stay", file=sys.stderr)
        return 1
    sparse, cards = sample_train_split(args.raw)
    exponents = fit(sparse)
    print(f"CRITEO_KAGGLE_ZIPF = {tuple(exponents)}")
    print(f"recorded:            {CRITEO_KAGGLE_ZIPF}")
    rows = sparse.shape[0]
    print(f"{'':32} {'emb rows':>9} {'Zipf':>6} {'hot 1%':>7}")
    print(f"{'real sample, ' + str(rows) + ' rows':32} %9d %6.3f %7.3f" % skew(sparse, cards))
    drawn_cards, drawn = draw_like_a_sample(CRITEO_CARDINALITIES, exponents, rows, seed=0)
    print(f"{'fitted tail drawn like it':32} %9d %6.3f %7.3f" % skew(drawn, drawn_cards))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
