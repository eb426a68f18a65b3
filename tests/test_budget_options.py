"""Every compression method at a memory budget: the options its ``options_at_budget``
chooses hold, on real tensors, at most the budget (a fraction of full's total embedding
bytes) and no more than a stated slack below it; unreachable budgets say why."""

from __future__ import annotations

import pytest
import torch

from suite.embeddings.base import EmbeddingContext
from suite.embeddings.budget import BudgetUnreachable, built_bytes, full_bytes, options_at_budget
from suite.embeddings.fiited import FiitedEmbedding, FiitedOptions, fiited_bytes_bound

CARDS = [3, 40, 150, 900, 2500, 7000, 20000, 60000]
DIM = 16

# the most a method's chosen bytes may fall short of its budget: continuous knobs come
# within 1%; integer knobs (dims, ranks, widths, collisions) are as close as their step
SLACK = {
    "hash": 0.01,
    "robe": 0.01,
    "adaembed": 0.01,
    "mixed_dim": 0.05,
    "dhe": 0.05,
    "ttrec": 0.15,
    "qr": 0.35,
}
REACHES = {  # the smallest fraction of full each reaches on CARDS (below: unreachable)
    "hash": 1 / 64,
    "robe": 1 / 64,
    "dhe": 1 / 64,
    "ttrec": 1 / 64,
    "qr": 1 / 32,
    "adaembed": 1 / 8,
    "mixed_dim": 1 / 8,
}
FRACTIONS = [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64]


@pytest.mark.parametrize("name", sorted(SLACK))
def test_chosen_options_fit_the_budget_within_slack(name: str) -> None:
    full = full_bytes(DIM, CARDS)
    for fraction in FRACTIONS:
        budget = int(fraction * full)
        if fraction < REACHES[name]:
            with pytest.raises(BudgetUnreachable, match="smallest setting"):
                options_at_budget(name, fraction, DIM, CARDS)
            continue
        options = options_at_budget(name, fraction, DIM, CARDS)
        real = built_bytes(name, options, CARDS)
        assert real <= budget, (name, fraction, options)
        assert real >= (1 - SLACK[name]) * budget, (name, fraction, options, real / budget)


def test_alpt_takes_the_widest_bits_that_fit() -> None:
    full = full_bytes(DIM, CARDS)
    # per row 4 + (dim x bits / 8) + 4 + 4 (values, step size, two row states) of 68
    assert options_at_budget("alpt", 1 / 2, DIM, CARDS)["bits"] == 8
    assert options_at_budget("alpt", 1 / 4, DIM, CARDS)["bits"] == 2
    assert built_bytes("alpt", {"dim": DIM, "bits": 4}, CARDS) > full / 4
    with pytest.raises(BudgetUnreachable, match="bits=2"):
        options_at_budget("alpt", 1 / 8, DIM, CARDS)


def test_fiited_bound_is_exact_when_built_and_holds_once_pruned() -> None:
    options = FiitedOptions(dim=DIM, budget=1.0)
    assert fiited_bytes_bound(CARDS, options) == built_bytes("fiited", {"dim": DIM}, CARDS)
    full = full_bytes(DIM, CARDS)
    for fraction in (1 / 2, 1 / 8, 1 / 64):
        chosen = options_at_budget("fiited", fraction, DIM, CARDS)
        bound = fiited_bytes_bound(CARDS, FiitedOptions(**chosen))
        assert (1 - 0.01) * fraction * full <= bound <= fraction * full
        context = EmbeddingContext(CARDS, torch.device("cpu"), seed=0)
        emb = FiitedEmbedding(FiitedOptions(**chosen, warmup_steps=0, prune_every=1), context)
        emb.after_step(1)  # no gradient pending: prunes to the budget now
        assert emb.live_chunks() == round(chosen["budget"] * sum(CARDS) * 4)
        assert emb.memory().total <= bound


def test_a_method_without_a_budget_hook_is_refused() -> None:
    with pytest.raises(Exception, match="takes no budget"):
        options_at_budget("full", 0.5, DIM, CARDS)


@pytest.mark.parametrize("optimizer", ["adagrad", "sgd"])
def test_budgets_count_the_runs_own_sparse_optimizer(optimizer: str) -> None:
    full = full_bytes(DIM, CARDS, optimizer)
    assert full != full_bytes(DIM, CARDS)  # row-wise state is one float a row
    for name in ("hash", "robe"):
        options = options_at_budget(name, 1 / 4, DIM, CARDS, optimizer)
        real = built_bytes(name, options, CARDS, optimizer)
        assert 0.99 * full / 4 <= real <= full / 4, name
    built = FiitedOptions(dim=DIM, budget=1.0)
    assert fiited_bytes_bound(CARDS, built, optimizer) == built_bytes(
        "fiited", {"dim": DIM}, CARDS, optimizer
    )
    if optimizer == "adagrad":  # a float of state per value, as full's: never 1/2
        with pytest.raises(BudgetUnreachable, match="bits=2"):
            options_at_budget("alpt", 1 / 2, DIM, CARDS, optimizer)
    else:
        alpt = options_at_budget("alpt", 1 / 2, DIM, CARDS, optimizer)
        assert built_bytes("alpt", alpt, CARDS, optimizer) <= full / 2
