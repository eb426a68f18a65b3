"""The dense optimizer step: per-tensor loop vs ``foreach`` vs ``fused``, side by side.

    python benchmarks/bench_optimizers.py [--rounds 5]

On the MLP parameters of issue 16's DLRM (bottom 13-512-256-64-16, top 367-512-256-1),
for Adam, Adagrad and SGD: CPU microseconds per ``step()``, the three forms interleaved
round by round; prints each form's cost relative to the loop with the mean and 95% CI
over rounds, and writes ``results/bench/optimizers.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

# isort: off
import suite  # noqa: F401  first: sets OMP_WAIT_POLICY before torch loads libgomp

# isort: on
import torch

from suite.stats import mean_ci

ROOT = Path(__file__).resolve().parents[1]
LAYERS = [(13, 512), (512, 256), (256, 64), (64, 16), (367, 512), (512, 256), (256, 1)]
OPTIMIZERS = {"adam": torch.optim.Adam, "adagrad": torch.optim.Adagrad, "sgd": torch.optim.SGD}
FORMS = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def step_cost(params: list[torch.nn.Parameter], name: str, form: str, seconds: float) -> float:
    """CPU microseconds per ``step()`` (CPU time: other processes do not inflate it)."""
    opt = OPTIMIZERS[name](params, lr=1e-6, **FORMS[form])
    for _ in range(5):
        opt.step()
    steps, start = 0, time.process_time()
    while time.process_time() - start < seconds:
        opt.step()
        steps += 1
    return (time.process_time() - start) / steps * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.3, help="per measurement")
    parser.add_argument("--out", default=str(ROOT / "results" / "bench" / "optimizers.json"))
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    params = []
    for fan_in, fan_out in LAYERS:
        params += [
            torch.nn.Parameter(torch.randn(fan_out, fan_in)),
            torch.nn.Parameter(torch.randn(fan_out)),
        ]
    for p in params:
        p.grad = torch.randn_like(p)
    report: dict = {"threads": torch.get_num_threads(), "results": []}
    print(f"{'optimizer':<9} {'form':<8} {'us/step':>8}  cost vs loop, mean [95% CI]")
    for name in OPTIMIZERS:
        costs: dict[str, list[float]] = {form: [] for form in FORMS}
        for r in range(args.rounds):
            for form in FORMS if r % 2 == 0 else list(FORMS)[::-1]:
                costs[form].append(step_cost(params, name, form, args.seconds))
        for form, values in costs.items():
            ci = mean_ci([v / loop for v, loop in zip(values, costs["loop"], strict=True)])
            report["results"].append(
                {
                    "optimizer": name,
                    "form": form,
                    "us_per_step": values,
                    "vs_loop": ci.mean,
                    "ci": [ci.low, ci.high],
                }
            )
            print(
                f"{name:<9} {form:<8} {min(values):>8.0f}  {ci.mean:.2f} [{ci.low:.2f}, {ci.high:.2f}]"
            )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
