"""``suite resume RUN_ID``: continue a killed run from its last checkpoint, in its MLflow run."""

from __future__ import annotations

import argparse
import tempfile

from suite.errors import SuiteError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "resume",
        help="continue a killed run from its last checkpoint",
        description="Read the run's config from MLflow and continue it from its last checkpoint "
        "(train.checkpoint_every), in the same MLflow run; the same as `suite run ... --resume`.",
    )
    parser.add_argument("run_id", metavar="RUN_ID", help="the MLflow run id of the killed run")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI of the run")
    parser.add_argument("--out", metavar="RESULT.json", help="also write the result JSON here")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from mlflow.tracking import MlflowClient

    from suite.commands.run import print_result
    from suite.config import load_yaml, validate_config
    from suite.runs.single import execute
    from suite.tracking import resolve_tracking_uri

    uri = resolve_tracking_uri(args.tracking_uri)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = MlflowClient(tracking_uri=uri).download_artifacts(
                args.run_id, "config.yaml", tmp
            )
        except Exception as exc:  # unknown run, unreachable store, no config artifact
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise SuiteError(
                f"cannot read run {args.run_id}'s config.yaml from {uri}: {message}"
            ) from None
        data = load_yaml(path)
    data.setdefault("tracking", {})["uri"] = uri
    config = validate_config(data, f"run {args.run_id}'s config.yaml")
    print_result(execute(config, out=args.out, resume=True))
    return 0
