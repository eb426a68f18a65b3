"""Is the plain baseline the reference? The suite's DLRM step, ``bench_peak``'s plain one,
and facebookresearch/dlrm's own ``DLRM_Net`` with its own training step, side by side.

    python benchmarks/bench_reference.py --dlrm PATH [--rounds 6] [--batches 2048,128]

``PATH`` is a local checkout of https://github.com/facebookresearch/dlrm (never
downloaded here; ``RECSUITE_DLRM_CHECKOUT`` names it for ``nox -s bench``, which skips
this script without it). The reference side is its ``dlrm_s_pytorch.py`` as its training
loop runs it: ``DLRM_Net`` (an ``nn.EmbeddingBag`` per table, the MLPs with a sigmoid on
top, the interaction with its index lists built every step), ``dlrm_wrap``,
``loss_fn_wrap`` (``BCELoss``), the loss read back as numpy, ``zero_grad``, ``backward``,
one ``torch.optim.SGD`` step and its ``LRPolicyScheduler`` step; its collate's per-table
index rows and offsets are built from each batch. All three sides share the model of
issue 16 (``bench_dense_step.bench_config``), the data and the :class:`BatchLoader`.

The script imports ``sklearn.metrics`` and ``torch.utils.tensorboard`` for its reports
only; where they are not installed they are stood in by empty modules (nothing the
timed step calls). Sides rotate round by round; ratios are per round, mean and 95% CI
over rounds. Writes ``results/bench/reference.json``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.machinery
import os
import sys
import types
from collections.abc import Callable
from pathlib import Path

# isort: off
import suite  # noqa: F401  first: sets OMP_WAIT_POLICY before torch loads libgomp

# isort: on
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, write_json
from bench_dense_step import bench_config
from bench_peak import Step, measure, plain_step, suite_step

from suite.config import RunConfig
from suite.data.loader import BatchLoader
from suite.data.prepared import PreparedDataset
from suite.data.source import get_prepared
from suite.engine.build import seed_everything
from suite.errors import SuiteError
from suite.stats import mean_ci
from suite.tasks.throughput import cycle

REPORT_ONLY_IMPORTS = {"sklearn": ("metrics",), "torch.utils.tensorboard": ()}


def _stand_in(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    return module


def load_reference(checkout: Path) -> types.ModuleType:
    """``dlrm_s_pytorch`` from a checkout of facebookresearch/dlrm."""
    script = checkout / "dlrm_s_pytorch.py"
    if not script.is_file():
        raise SuiteError(
            f"--dlrm {checkout}: no dlrm_s_pytorch.py there; expected a checkout of "
            "https://github.com/facebookresearch/dlrm"
        )
    for name, children in REPORT_ONLY_IMPORTS.items():
        try:
            importlib.import_module(name)
        except ImportError:
            parent = _stand_in(name)
            if name == "torch.utils.tensorboard":
                parent.SummaryWriter = object  # type: ignore[attr-defined]
            sys.modules[name] = parent
            for child in children:
                sys.modules[f"{name}.{child}"] = _stand_in(f"{name}.{child}")
                setattr(parent, child, sys.modules[f"{name}.{child}"])
    sys.path.insert(0, str(checkout))
    return importlib.import_module("dlrm_s_pytorch")


def reference_inputs(sparse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference collate's ``lS_o`` and ``lS_i`` (both ``[tables, B]``, int64) from a
    batch's ids ``sparse [B, tables]``: one id per bag, bag ``b`` starting at ``b``."""
    indices = sparse.t().contiguous().long()
    offsets = torch.arange(sparse.shape[0]).repeat(indices.shape[0], 1)
    return offsets, indices


def reference_step(ref: types.ModuleType) -> Callable[[RunConfig, PreparedDataset, int], Step]:
    """A ``bench_peak``-style side maker running ``ref``'s own model and step."""

    def make(config: RunConfig, data: PreparedDataset, batch: int) -> Step:
        seed_everything(config.seed)
        options = config.model.typed_options()
        dim = config.embedding.options["dim"]
        vectors = data.schema.num_sparse + 1
        ln_bot = np.array([data.schema.num_dense, *options.bottom_mlp, dim])
        ln_top = np.array([dim + vectors * (vectors - 1) // 2, *options.top_mlp, 1])
        model = ref.DLRM_Net(
            dim,
            np.array(data.schema.cardinalities),
            ln_bot,
            ln_top,
            arch_interaction_op="dot",
            arch_interaction_itself=False,
            sigmoid_bot=-1,
            sigmoid_top=ln_top.size - 2,
            ndevices=-1,
            loss_function="bce",
        )
        # dlrm_wrap and loss_fn_wrap read the script's globals
        ref.dlrm = model
        ref.args = argparse.Namespace(loss_function="bce", mlperf_logging=False)
        optimizer = torch.optim.SGD(model.parameters(), lr=config.train.dense_lr)
        scheduler = ref.LRPolicyScheduler(optimizer, 0, 0, 0)
        batches = cycle(BatchLoader(data.split("train"), batch, shuffle=True, seed=config.seed))
        cpu = torch.device("cpu")
        totals = {"loss": 0.0}

        def one() -> int:
            b = next(batches)
            offsets, indices = reference_inputs(b.sparse)
            target = b.label.view(-1, 1)
            out = ref.dlrm_wrap(b.dense, offsets, indices, False, cpu, ndevices=1)
            loss = ref.loss_fn_wrap(out, target, False, cpu)
            value = loss.detach().cpu().numpy()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            totals["loss"] += float(value) * len(b)
            return len(b)

        return one

    return make


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--dlrm",
        default=os.environ.get("RECSUITE_DLRM_CHECKOUT"),
        help="checkout of facebookresearch/dlrm (default: $RECSUITE_DLRM_CHECKOUT)",
    )
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each window")
    parser.add_argument("--batches", default="2048,128")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args, _ = parser.parse_known_args(argv)  # nox -s bench passes every script its args
    if not args.dlrm:
        print(
            "bench_reference: skipped; give --dlrm PATH or set RECSUITE_DLRM_CHECKOUT to a "
            "checkout of https://github.com/facebookresearch/dlrm"
        )
        return 0
    try:
        ref = load_reference(Path(args.dlrm))
    except SuiteError as exc:
        parser.error(str(exc))
    torch.set_num_threads(args.threads)
    config = bench_config()
    data = get_prepared(config.dataset, progress=False)
    sides: list[tuple[str, Callable[[RunConfig, PreparedDataset, int], Step]]] = [
        ("suite", suite_step),
        ("plain", plain_step),
        ("reference", reference_step(ref)),
    ]
    report: dict = {"dlrm_checkout": Path(args.dlrm).name, "rounds": args.rounds, "batches": {}}
    rows = []
    for batch in [int(b) for b in args.batches.split(",")]:
        rates: dict[str, list[float]] = {name: [] for name, _ in sides}
        for r in range(args.rounds):
            for name, make in sides[r % 3 :] + sides[: r % 3]:
                window = measure(make, config, data, batch, args.seconds)
                rates[name].append(window.samples_per_second)
        entry: dict = {"samples_per_s": rates, "ratios": {}}
        for top, bottom in (("suite", "plain"), ("suite", "reference"), ("plain", "reference")):
            ratios = [a / b for a, b in zip(rates[top], rates[bottom], strict=True)]
            ci = mean_ci(ratios)
            entry["ratios"][f"{top}/{bottom}"] = {
                "per_round": ratios,
                "mean": ci.mean,
                "low": ci.low,
                "high": ci.high,
            }
            rows.append(
                {
                    "batch": batch,
                    "ratio": f"{top}/{bottom}",
                    "mean [95% CI]": f"{ci.mean:.2f} [{ci.low:.2f}, {ci.high:.2f}]",
                    "samples/s (mean)": f"{np.mean(rates[top]):,.0f} / {np.mean(rates[bottom]):,.0f}",
                }
            )
        report["batches"][str(batch)] = entry
    print(f"ratios over {args.rounds} rounds, sides rotated")
    print_table(rows, ["batch", "ratio", "mean [95% CI]", "samples/s (mean)"])
    print(f"wrote {write_json('reference', report)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
