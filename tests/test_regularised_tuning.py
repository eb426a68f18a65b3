"""A baseline tuned as well as the methods (issue 68): the regularisers a run may train with
(``train.embedding_l2``, ``train.weight_decay``, DLRM's ``model.options.dropout``), opt-in
and leaving every earlier run's config hash and numbers as they were, and the tuning
block's search settings (``startup_trials``, ``pruning``, ``run_seed``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch
import yaml
from torch import nn

from suite.config import RunConfig
from suite.data.source import get_prepared
from suite.engine.build import build_model
from suite.engine.train import make_dense_optimizer, train
from suite.errors import ConfigError
from suite.models.base import RecModel
from suite.reproduce.spec import TUNED_ENV, TunedFile, load_spec, study_name, tuning_study
from suite.reproduce.tuned import read_tuned, tuned_path, write_tuned
from suite.reproduce.tuning import kept_entries, study_spec, top_spread
from tests.conftest import tiny_config
from tests.test_reproduce_tuning import TUNING, spec_data, tune, write_spec

REPO = Path(__file__).resolve().parents[1]
STEPS = ["train.max_steps=30"]
DHE = ["embedding.options.k=64", "embedding.options.hidden=[32]"]
"""A DHE small enough for a test."""


def tiny_spec(tuning: dict[str, Any]) -> dict[str, Any]:
    """The tuning tests' tiny spec with ``tuning`` as its standard profile's block, without
    claims (what these tests check is the block)."""
    return {**spec_data(tuning), "claims": []}


@pytest.fixture
def tuned_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Tuned files go under tmp_path, never into the repository's spec folder."""
    monkeypatch.setenv(TUNED_ENV, str(tmp_path / "tuned"))
    return tmp_path / "tuned"


def trained(config: RunConfig) -> RecModel:
    """``config``'s model after its (short) training."""
    data = get_prepared(config.dataset, progress=False)
    model = build_model(config, data)
    train(model, data, config.train, config.seed, torch.device("cpu"))
    return model


def embedding_norm(model: RecModel, config: RunConfig) -> float:
    """Mean squared norm of the embeddings the model looks up for validation rows."""
    data = get_prepared(config.dataset, progress=False)
    model.eval()
    with torch.no_grad():
        embedded = model.embedding(torch.from_numpy(data.split("val").sparse[:512].copy()))
    return float(embedded.float().square().sum(-1).mean())


# -- defaults: the same hash and the same training as before the options


def test_stored_runs_keep_their_config_hash() -> None:
    """Every stored quick run's recorded config resolves, with the new fields at their
    defaults, to the hash it was stored under."""
    files = sorted((REPO / "results" / "quick" / "runs").glob("*/seed-*.json"))
    assert files
    for path in files:
        record = json.loads(path.read_text())
        config = RunConfig.model_validate(record["config"])
        assert config.config_hash() == record["config_hash"], path


def test_the_options_enter_the_identity_only_when_set() -> None:
    base = tiny_config()
    zero = tiny_config(
        overrides=["train.embedding_l2=0.0", "train.weight_decay=0", "model.options.dropout=0"]
    )
    assert zero.config_hash() == base.config_hash()
    identity = base.identity()
    assert "embedding_l2" not in identity["train"] and "weight_decay" not in identity["train"]
    assert "dropout" not in identity["model"]["options"]
    hashes = {
        tiny_config(overrides=[o]).config_hash()
        for o in ("train.embedding_l2=1e-5", "train.weight_decay=1e-5", "model.options.dropout=0.1")
    }
    assert len(hashes) == 3 and base.config_hash() not in hashes


def test_defaults_train_on_the_path_before_the_options(monkeypatch: pytest.MonkeyPatch) -> None:
    """At the defaults the step never takes the regularised forward, the dense optimizer is
    one param group without decay and DLRM holds no dropout: the numbers stay bit for bit."""

    def refused(*args: Any) -> Any:
        raise AssertionError("forward_embedded at embedding_l2 0")

    monkeypatch.setattr(RecModel, "forward_embedded", refused)
    config = tiny_config(overrides=STEPS)
    model = trained(config)
    assert not any(isinstance(m, nn.Dropout) for m in model.modules())
    opt = make_dense_optimizer(model.dense_parameters(), config.train, model.net_parameters())
    assert opt is not None and len(opt.param_groups) == 1
    assert opt.param_groups[0]["weight_decay"] == 0


# -- embedding_l2: every method's lookup, its gradient reaching the embedding


@pytest.mark.parametrize(
    ("embedding", "extra"),
    [
        ("full", []),  # fbgemm's fused row-wise Adagrad
        ("full", ["embedding.options.backend=torch"]),
        ("qr", []),
        ("fiited", []),  # updates itself from its output's gradient
        ("alpt", []),  # low-precision rows
        ("ttrec", []),
        ("dhe", DHE),  # no table: an MLP's output
    ],
)
def test_embedding_l2_shrinks_the_embeddings(embedding: str, extra: list[str]) -> None:
    plain = tiny_config(embedding=embedding, overrides=STEPS + extra)
    l2 = tiny_config(embedding=embedding, overrides=[*STEPS, *extra, "train.embedding_l2=0.1"])
    assert embedding_norm(trained(l2), l2) < 0.75 * embedding_norm(trained(plain), plain)


def test_embedding_l2_is_refused_in_a_distributed_run(monkeypatch: pytest.MonkeyPatch) -> None:
    config = tiny_config(overrides=[*STEPS, "train.embedding_l2=0.1"])
    data = get_prepared(config.dataset, progress=False)
    model = build_model(config, data)
    monkeypatch.setattr(type(model.ranks), "distributed", True)
    with pytest.raises(ConfigError, match=r"train\.embedding_l2: not supported in a distributed"):
        train(model, data, config.train, config.seed, torch.device("cpu"))


# -- weight_decay: the backbone's weights, not the embedding method's


def backbone_norm(model: RecModel) -> float:
    return float(sum(p.detach().square().sum() for p in model.backbone.parameters()))


def test_weight_decay_shrinks_the_backbone_and_spares_the_embedding() -> None:
    plain = tiny_config(embedding="dhe", overrides=STEPS + DHE)
    decayed = tiny_config(embedding="dhe", overrides=[*STEPS, *DHE, "train.weight_decay=1.0"])
    assert backbone_norm(trained(decayed)) < 0.9 * backbone_norm(trained(plain))

    model = build_model(decayed, get_prepared(decayed.dataset, progress=False))
    opt = make_dense_optimizer(model.dense_parameters(), decayed.train, model.net_parameters())
    assert opt is not None
    decay, rest = opt.param_groups
    backbone = {id(p) for p in model.backbone.parameters()}
    assert decay["weight_decay"] == 1.0 and {id(p) for p in decay["params"]} == backbone
    dhe_params = {id(p) for p in model.embedding.parameters()}
    assert rest["weight_decay"] == 0.0 and {id(p) for p in rest["params"]} == dhe_params


# -- DLRM's dropout


def test_dlrm_dropout_trains_differently_and_evaluates_deterministically() -> None:
    plain = tiny_config(overrides=STEPS)
    dropped = tiny_config(overrides=[*STEPS, "model.options.dropout=0.5"])
    a, b = trained(plain), trained(dropped)
    assert sum(isinstance(m, nn.Dropout) for m in b.modules()) == 4  # 2 hidden layers each
    top = [k for k in b.state_dict() if k.startswith("backbone.")]
    assert len(top) == len([k for k in a.state_dict() if k.startswith("backbone.")])
    assert embedding_norm(a, plain) != embedding_norm(b, dropped)  # other gradients
    val = get_prepared(dropped.dataset, progress=False).split("val")
    dense, sparse = (
        torch.from_numpy(val.dense[:256].copy()),
        torch.from_numpy(val.sparse[:256].copy()),
    )
    b.eval()
    with torch.no_grad():
        assert torch.equal(b(dense, sparse), b(dense, sparse))  # evaluation drops nothing
    with pytest.raises(ConfigError, match=r"model\.options\.dropout"):
        tiny_config(overrides=["model.options.dropout=1.0"])


# -- the tuning block's search settings


def test_committed_tuning_blocks_keep_their_study() -> None:
    """A committed block (6 trials, no startup_trials) still loads and its study is the
    one it was tuned with: TPE at Optuna's default start, no pruning, the first seed."""
    spec = load_spec("dhe")
    tuning = spec.profiles["standard"].tuning
    assert tuning is not None and tuning.n_trials == 6 and tuning.startup_trials is None
    study = study_spec(spec, "standard", "full", {})
    assert study.sampler.n_startup_trials is None and study.pruning is None
    assert study.base.seed == spec.profiles["standard"].seeds[0]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"n_trials": 6, "startup_trials": 3}, r"tuning: startup_trials: 3 random trials .*>= 8"),
        ({"run_seed": 4}, r"tuning\.run_seed: 4 is one of the profile's evaluation seeds"),
        ({"pruning": {"n_warmup_steps": 2}}, r"tuning\.pruning: trials validate only when"),
        (
            {"pruning": {"warmup_steps": 2}},
            r"pruning\.warmup_steps: Extra inputs are not permitted",
        ),
    ],
)
def test_a_bad_search_setting_fails_in_one_line_naming_the_field(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    path = write_spec(tmp_path, tiny_spec({**TUNING, **change}))
    with pytest.raises(ConfigError, match=message) as info:
        load_spec(path)
    assert "\n" not in str(info.value)


def test_the_search_settings_reach_the_study(tmp_path: Path) -> None:
    block = {
        **TUNING,
        "n_trials": 5,
        "startup_trials": 2,
        "run_seed": 7,
        "pruning": {"n_startup_trials": 1, "n_warmup_steps": 10},
        "base": {"train": {"eval_every_steps": 4}},
    }
    spec = load_spec(write_spec(tmp_path, tiny_spec(block)))
    study = study_spec(spec, "standard", "full", {})
    assert study.sampler.n_startup_trials == 2 and study.base.seed == 7
    assert study.pruning is not None and study.pruning.n_warmup_steps == 10
    assert tuning_study(spec, "standard", "full", study.base).name == study_name(
        "tiny", "standard", "full"
    )


def test_a_pruned_tuning_records_its_settings_and_the_top_spread(
    tmp_path: Path, tuned_dir: Path
) -> None:
    """``--tune`` with every setting: real trials report their validations to a real
    Optuna storage, the median pruner stops the poor ones, and the tuned file records the
    settings and the three best trials' AUC spread; another run_seed tunes again."""
    block = {
        **TUNING,
        "n_trials": 4,
        "startup_trials": 1,
        "runs": {"full": {}},
        "share": {},
        "run_seed": 9,
        "pruning": {"n_startup_trials": 1, "n_warmup_steps": 4},
        "base": {
            "train": {"eval_every_steps": 4, "max_steps": 16},
            "tracking": {"enabled": False},  # Optuna's storage alone: a quicker test
        },
    }
    spec_path = write_spec(tmp_path / "specs", tiny_spec(block))
    assert tune(spec_path, tmp_path, "a") == 0
    entry = read_tuned("tiny", "standard").runs["full"]
    assert entry.trials == 4 and entry.run_seed == 9 and entry.startup_trials == 1
    assert entry.pruning == {**block["pruning"], "name": "median", "interval_steps": 1}

    db = f"sqlite:///{tmp_path / 'a' / 'optuna.db'}"
    trials = optuna.load_study(study_name="tune.tiny.standard.full", storage=db).trials
    assert all(t.intermediate_values for t in trials)  # every validation reported its AUC
    assert {t.state for t in trials} <= {
        optuna.trial.TrialState.COMPLETE,
        optuna.trial.TrialState.PRUNED,
    }
    assert any(t.state == optuna.trial.TrialState.PRUNED for t in trials)  # stopped early
    aucs = [t.value for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert entry.top3_val_auc_spread == top_spread([float(a) for a in aucs])
    text = tuned_path("tiny", "standard").read_text()
    assert "top3_val_auc_spread" in text if len(aucs) >= 3 else "top3" not in text

    spec = load_spec(spec_path)
    assert list(kept_entries(spec, "standard")) == ["full"]
    other = copy.deepcopy(block) | {"run_seed": 11}
    write_spec(tmp_path / "specs", tiny_spec(other))
    assert kept_entries(load_spec(spec_path), "standard") == {}  # another trial seed: tune again


def test_the_top_spread_is_that_of_the_three_best() -> None:
    assert top_spread([0.70, 0.74, 0.71, 0.60, 0.73]) == pytest.approx(0.74 - 0.71)
    assert top_spread([0.70, 0.74]) is None  # fewer than three complete trials


def test_an_entry_without_the_new_fields_is_written_as_before(
    tmp_path: Path, tuned_dir: Path
) -> None:
    """A tuned file of blocks without the settings keeps its keys (no nulls): committed
    tuned files stay byte for byte, and are still kept by ``--tune``."""
    committed = REPO / "suite" / "reproductions" / "tuned" / "dhe.standard.yaml"
    tuned = TunedFile.model_validate(yaml.safe_load(committed.read_text()))
    assert write_tuned(tuned).read_text() == committed.read_text()
    assert list(kept_entries(load_spec("dhe"), "standard")) == list(tuned.runs)
