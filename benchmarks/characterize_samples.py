"""Access characterization of criteo-synth beside the real samples and Meta's published
histogram: ``python benchmarks/characterize_samples.py [--samples ../shared/data]``.

Every characterization goes down the one run path (``characterize`` task). The real raw
samples (see ../shared/data/README.md) are read where they are and never copied; only
summary figures reach ``results/characterize/REPORT.md`` and its plot. A second table puts
criteo-synth (today's default, regime criteo) beside the real Criteo sample at the sample's
own rows and split on the four tail figures of ``suite.data.tail_stats``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from suite.config import build_config  # noqa: E402
from suite.data.access import PUBLISHED_REUSE_HISTOGRAM, REUSE_LABELS  # noqa: E402
from suite.data.source import get_prepared  # noqa: E402
from suite.data.tail_stats import (  # noqa: E402
    CRITEO_SAMPLE_SPLIT,
    LABELS,
    TOLERANCE,
    TailStatistics,
    prepared_tail_statistics,
)
from suite.figures import save_figure  # noqa: E402
from suite.runs.single import execute  # noqa: E402

OUT = ROOT / "results" / "characterize"
SAMPLES = {
    # name: dataset, raw path under the samples dir, protocol, extra options
    "criteo sample (8k rows)": ("criteo-kaggle", "criteo/train.txt", "dlrm", {}),
    "avazu sample (9k rows)": ("avazu", "avazu/train.csv", "random-811", {}),
    "movielens-100k": ("movielens", "movielens/ml-100k", "random-811", {"variant": "100k"}),
}


def characterize(name: str, dataset: str, raw: str | None, protocol: str | None, options: dict):
    values = {
        "train.progress": False,
        "tracking.enabled": False,
        "tracking.results_dir": str(ROOT / "results" / "runs"),
        "task.options.plot": False,
    }
    if raw:
        values |= {"dataset.raw": raw, "dataset.protocol": protocol}
    config = build_config(
        components={"dataset": dataset, "task": "characterize"},
        values=values,
        overrides=[f"dataset.options.{k}={v}" for k, v in options.items()],
    )
    print(f"characterizing {name} ...", flush=True)
    return execute(config)


def main() -> int:
    default = ROOT.parent / "shared" / "data"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=Path, default=default, help="real samples folder")
    args = parser.parse_args()

    results = {"criteo-synth": characterize("criteo-synth", "criteo-synth", None, None, {})}
    for regime in ("kaggle", "criteo"):
        name = f"criteo-synth, regime {regime}"
        results[name] = characterize(name, "criteo-synth", None, None, {"regime": regime})
    for name, (dataset, rel, protocol, options) in SAMPLES.items():
        raw = args.samples / rel
        if raw.exists():
            results[name] = characterize(name, dataset, str(raw), protocol, options)
        else:
            print(f"skipping {name}: {raw} is absent")
    write_report(results, tail_figures(args.samples / SAMPLES["criteo sample (8k rows)"][1]))
    return 0


SYNTH_TAILS = (("criteo-synth (today's default)", None), ("criteo-synth, regime criteo", "criteo"))


def synth_tail(regime: str | None, split: tuple[int, ...] | None) -> TailStatistics:
    """The tail figures of criteo-synth in ``regime`` (None: default) at ``split`` (train,
    val, test rows; None: the options' defaults)."""
    keys = ("train_rows", "val_rows", "test_rows")
    overrides = [f"dataset.options.{k}={v}" for k, v in zip(keys, split or (), strict=False)]
    overrides += [f"dataset.options.regime={regime}"] if regime else []
    spec = build_config(components={"dataset": "criteo-synth"}, overrides=overrides).dataset
    return prepared_tail_statistics(get_prepared(spec, progress=False))


def tail_figures(raw: Path) -> dict[str, TailStatistics]:
    """The four tail figures of criteo-synth (today's default, regime criteo) at the real
    Criteo sample's rows and split, and of the sample itself where ``raw`` is present."""
    out = {name: synth_tail(regime, CRITEO_SAMPLE_SPLIT) for name, regime in SYNTH_TAILS}
    if raw.exists():
        values = {"dataset.raw": str(raw), "dataset.protocol": "dlrm"}
        spec = build_config(components={"dataset": "criteo-kaggle"}, values=values).dataset
        out["criteo sample (8k rows)"] = prepared_tail_statistics(
            get_prepared(spec, progress=False)
        )
    else:
        print(f"skipping the criteo sample's tail figures: {raw} is absent")
    return out


def tail_rows(figures: dict[str, TailStatistics], real: TailStatistics | None) -> list[dict]:
    """Table rows of tail figures, with each one's largest relative gap to ``real``."""
    rows = []
    for name, stats in figures.items():
        row = {"data": name} | {LABELS[k]: f"{v:.1%}" for k, v in stats.as_dict().items()}
        if real is not None:
            worst = max(stats.relative_gaps(real).values())
            row["largest gap to the sample"] = "-" if stats is real else f"{worst:.0%}"
        rows.append(row)
    return rows


def tail_lines(figures: dict[str, TailStatistics]) -> list[str]:
    """The tail section of the report: the table at the sample's rows with each regime's gap
    to the sample, then the same figures at criteo-synth's default size."""
    import pandas as pd

    real = figures.get("criteo sample (8k rows)")
    at_default = {f"{name}, 400k/50k/50k": synth_tail(r, None) for name, r in SYNTH_TAILS}
    train, val, test = CRITEO_SAMPLE_SPLIT
    return [
        "## Tail and split at the real sample's rows",
        "",
        f"criteo-synth at the real Criteo sample's {train + val + test:,} rows and split",
        f"({train:,} train, {val:,} validation, {test:,} test: criteo-kaggle's dlrm protocol",
        "on the sample), beside the sample prepared by that protocol (`suite.data.tail_stats`;",
        "a lookup is one row's id of one feature, an id's count its occurrences in the train",
        "split; the hottest rows as the `characterize` task counts them, over the train split;",
        "the label rate over every split). Regime criteo (`dataset.options.regime: criteo`)",
        "draws ids over Criteo's real vocabularies with the per-feature tails fit to the",
        "sample, over seven days whose tail ids churn and whose teacher weights drift; val and",
        "test are the seventh day, and the tables hold the ids seen in training, so later ids",
        "unseen in it are the rare id 1, as prepare counts real data. The sample spans minutes",
        "of one day, so it cannot show day-to-day drift: the drift is chosen, and kept small",
        f"enough that each figure stays within {TOLERANCE:.0%} of the sample's",
        "(`tests/test_tail_regime.py`). The sample's label rate is below the full Kaggle",
        "set's 25.6%, which criteo-synth keeps.",
        "",
        "Made by `python benchmarks/characterize_samples.py` (with the rest of this report).",
        "",
        pd.DataFrame(tail_rows(figures, real)).to_markdown(index=False),
        "",
        "The same figures at criteo-synth's default size (400k train, 50k validation, 50k",
        "test rows; no real sample that large here):",
        "",
        pd.DataFrame(tail_rows(at_default, None)).to_markdown(index=False),
        "",
    ]


def write_report(results: dict, tail: dict[str, TailStatistics]) -> None:
    import pandas as pd
    import seaborn as sns
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    summary = pd.DataFrame(
        [
            {
                "data": name,
                "lookups": int(r.metrics["lookups"]),
                "unique rows": int(r.metrics["unique_rows"]),
                "Zipf exponent (R²)": f"{r.metrics['zipf_exponent']:.2f} ({r.metrics['zipf_r2']:.2f})",
                "hottest 1% rows: lookups": f"{r.metrics['hot_0.01_lookup_share']:.1%}",
                "hottest 10% rows: lookups": f"{r.metrics['hot_0.1_lookup_share']:.1%}",
                "LRU hit, 1% cache": f"{r.metrics['lru_hit_rate_0.01']:.1%}",
                "LFU hit, 1% cache": f"{r.metrics['lfu_hit_rate_0.01']:.1%}",
                "rows reused once": f"{r.metrics['reuse_once_unique_share']:.1%}",
            }
            for name, r in results.items()
        ]
    )
    histograms = pd.DataFrame(
        {"reuse factor": list(REUSE_LABELS)}
        | {
            f"{name} (lookups)": [r.details["reuse"]["lookups"][b] for b in REUSE_LABELS]
            for name, r in results.items()
        }
        | {"dlrm_datasets (published)": [PUBLISHED_REUSE_HISTOGRAM[b] for b in REUSE_LABELS]}
    )
    OUT.mkdir(parents=True, exist_ok=True)
    long = histograms.melt(id_vars="reuse factor", var_name="data", value_name="share")
    fig = Figure(figsize=(8, 4))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    sns.lineplot(data=long, x="reuse factor", y="share", hue="data", marker="o", ax=ax, sort=False)
    ax.tick_params(axis="x", rotation=60, labelsize=7)
    ax.set_title("Share of lookups by reuse factor (131072-sample windows)")
    ax.legend(fontsize=7, frameon=False)
    save_figure(fig, OUT / "reuse_histograms.png")
    lines = [
        "# Access characterization: criteo-synth, real samples, dlrm_datasets",
        "",
        "Made by `python benchmarks/characterize_samples.py` (the `characterize` task on each",
        "dataset's training split, in data order). The real samples are small excerpts of the",
        "public datasets (see ../shared/data/README.md), so their windows hold far fewer",
        "samples than 131072 and their reuse is not comparable in absolute terms with the",
        "full datasets'; the published histogram is facebookresearch/dlrm_datasets' (README,",
        "'Reuse pattern'), whose README does not say whether it counts rows or lookups.",
        "",
        summary.to_markdown(index=False),
        "",
        "Reuse-factor histograms, share of lookups per bin:",
        "",
        histograms.to_markdown(index=False, floatfmt=".3f"),
        "",
        "![reuse histograms](reuse_histograms.png)",
        "",
        *tail_lines(tail),
    ]
    (OUT / "REPORT.md").write_text("\n".join(lines), encoding="utf-8")
    print(summary.to_string(index=False))
    print(f"report: {OUT / 'REPORT.md'}")


if __name__ == "__main__":
    raise SystemExit(main())
