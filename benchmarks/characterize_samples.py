"""Access characterization of criteo-synth beside the real samples and Meta's published
histogram: ``python benchmarks/characterize_samples.py [--samples ../shared/data]``.

Every characterization goes down the one run path (``characterize`` task). The real raw
samples (see ../shared/data/README.md) are read where they are and never copied; only
summary figures reach ``results/characterize/REPORT.md`` and its plot.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from suite.config import build_config  # noqa: E402
from suite.data.access import PUBLISHED_REUSE_HISTOGRAM, REUSE_LABELS  # noqa: E402
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
    kaggle = "criteo-synth, regime kaggle"
    results[kaggle] = characterize(kaggle, "criteo-synth", None, None, {"regime": "kaggle"})
    for name, (dataset, rel, protocol, options) in SAMPLES.items():
        raw = args.samples / rel
        if raw.exists():
            results[name] = characterize(name, dataset, str(raw), protocol, options)
        else:
            print(f"skipping {name}: {raw} is absent")
    write_report(results)
    return 0


def write_report(results: dict) -> None:
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
    ]
    (OUT / "REPORT.md").write_text("\n".join(lines), encoding="utf-8")
    print(summary.to_string(index=False))
    print(f"report: {OUT / 'REPORT.md'}")


if __name__ == "__main__":
    raise SystemExit(main())
