"""``dhe``: Deep Hash Embedding (Kang et al., "Learning to Embed Categorical Features without
Embedding Tables for Recommendation", KDD 2021, arXiv 2010.10784).

No table. An id is encoded by ``k`` universal hash functions into a dense vector, which a
deep MLP (the embedding network) decodes to the embedding:

1. **Dense hash encoding.** ``H_j(key) = ((a_j * key + b_j) mod P) mod m`` for
   ``j = 1..k`` (``P = 2^31 - 1`` prime, ``a_j`` in ``[1, P)``, ``b_j`` in ``[0, P)`` drawn
   from ``seed``, ``m = buckets``, the paper's ``m = 10^6``), ``key = offset_t + id`` so
   the (feature, id) pairs of all features are distinct.
2. **Transform to real values.** ``uniform`` (the paper's choice: it found uniform and
   Gaussian encodings to work about equally well and uses uniform):
   ``u_j = 2 * H_j / (m - 1) - 1``, in ``[-1, 1]``. ``gaussian``: Box-Muller on pairs
   ``(H_{2i-1}, H_{2i})``: ``s = (H_{2i-1} + 1) / m`` and ``t = H_{2i} / m`` (both in
   ``[0, 1]``, ``s > 0``), ``z = sqrt(-2 ln s) * (cos 2 pi t, sin 2 pi t)``.
3. **Embedding network.** ``hidden`` layers ``Linear -> BatchNorm -> activation`` (Mish,
   as the paper recommends, with batch norm), then a ``Linear`` to ``dim``.

One network decodes every feature (its own ``offset_t`` keeps features apart), as the
Hetu and CCE implementations do for multi-feature models.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from pydantic import Field, field_validator, model_validator
from torch import nn

from suite.embeddings.base import (
    EmbeddingContext,
    EmbeddingMethod,
    EmbeddingOptions,
)
from suite.embeddings.budget import knob_hook
from suite.registry import EMBEDDINGS

DHE_PRIME = 2_147_483_647
"""``P = 2^31 - 1``: the universal hash's prime (above any key and ``m``)."""

Activation = Literal["mish", "relu", "swish", "tanh"]
Distribution = Literal["uniform", "gaussian"]

_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "mish": nn.Mish,
    "relu": nn.ReLU,
    "swish": nn.SiLU,
    "tanh": nn.Tanh,
}


class DHEOptions(EmbeddingOptions):
    """Encoding and embedding-network settings. ``backend`` is not used: DHE has no table.
    ``init: reference``: Glorot-uniform weights and zero biases (a Keras ``Dense`` layer's
    start; the paper's code is TensorFlow); ``torch``: ``nn.Linear``'s defaults."""

    k: int = Field(1024, ge=1, description="number of hash functions (encoding width)")
    buckets: int = Field(
        1_000_000, ge=2, description="m: buckets of each hash function (the paper's 10^6)"
    )
    distribution: Distribution = Field(
        "uniform", description="transform to real values (gaussian: Box-Muller, even k)"
    )
    hidden: list[int] = Field(
        [256, 256, 256, 256],
        min_length=1,
        description="widths of the hidden layers; the paper uses equal widths d_NN (e.g. "
        "1800 at k=1024) sized to a parameter budget; here 256, as a CPU train step at "
        "k=1024 (batch 128, 26 features, one thread) takes ~0.5 s at 4 x 256 and ~6 s at "
        "4 x 1800",
    )
    activation: Activation = Field("mish", description="hidden activation (the paper: Mish)")
    batch_norm: bool = Field(True, description="batch norm after each hidden layer")
    seed: int | None = Field(
        None, ge=0, description="seed of the hash coefficients (default: the run's seed)"
    )

    fbgemm_dim_rule = False  # no table: no fbgemm dim constraint

    @field_validator("hidden")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if min(value) < 1:
            raise ValueError(f"hidden: widths must be positive, got {value}")
        return value

    @model_validator(mode="after")
    def _even_for_gaussian(self) -> DHEOptions:
        if self.distribution == "gaussian" and self.k % 2:
            raise ValueError(f"k: gaussian (Box-Muller on pairs) needs an even k, got {self.k}")
        return self


def dhe_coefficients(k: int, seed: int) -> torch.Tensor:
    """``[2, k]`` int64: slopes ``a_j`` in ``[1, P)`` (row 0), offsets ``b_j`` in ``[0, P)``."""
    generator = torch.Generator().manual_seed(seed)
    a = torch.randint(1, DHE_PRIME, (k,), generator=generator)
    b = torch.randint(0, DHE_PRIME, (k,), generator=generator)
    return torch.stack([a, b]).to(torch.int64)


def dhe_hashes(keys: torch.Tensor, coefficients: torch.Tensor, buckets: int) -> torch.Tensor:
    """``keys [...] -> [..., k]`` int64: ``H_j(key) = ((a_j key + b_j) mod P) mod m``."""
    a, b = coefficients[0], coefficients[1]
    return ((keys.long() % DHE_PRIME).unsqueeze(-1) * a + b) % DHE_PRIME % buckets


def dhe_transform(hashes: torch.Tensor, buckets: int, distribution: Distribution) -> torch.Tensor:
    """Hash values ``[..., k]`` in ``[0, m)`` -> float32 ``[..., k]`` (see the module doc)."""
    h = hashes.double()
    if distribution == "uniform":
        return (h * (2.0 / (buckets - 1)) - 1.0).float()
    s = (h[..., 0::2] + 1.0) / buckets
    t = h[..., 1::2] / buckets
    radius = torch.sqrt(-2.0 * torch.log(s))
    angle = 2.0 * math.pi * t
    z = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=-1)
    return z.flatten(-2).float()


def dhe_network(options: DHEOptions) -> nn.Sequential:
    """``k -> hidden[0] -> ... -> dim``: ``Linear, BatchNorm1d, activation`` per hidden layer."""
    layers: list[nn.Module] = []
    width = options.k
    for out in options.hidden:
        layers.append(nn.Linear(width, out))
        if options.batch_norm:
            layers.append(nn.BatchNorm1d(out))
        layers.append(_ACTIVATIONS[options.activation]())
        width = out
    layers.append(nn.Linear(width, options.dim))
    return nn.Sequential(*layers)


def dhe_parameter_count(options: DHEOptions) -> int:
    """Learned floats of the network: ``(in + 1) * out`` per linear layer, ``2 * width``
    per batch norm."""
    widths = [options.k, *options.hidden, options.dim]
    count = sum((i + 1) * o for i, o in zip(widths[:-1], widths[1:], strict=True))
    return count + (2 * sum(options.hidden) if options.batch_norm else 0)


def counted_batch_norm(
    layer: nn.BatchNorm1d, x: torch.Tensor, counts: torch.Tensor
) -> torch.Tensor:
    """Training-mode ``layer`` over a batch of ``N = counts.sum()`` rows given as ``x [U, C]``
    distinct rows, row ``u`` occurring ``counts[u]`` times: the count-weighted mean and
    (biased) variance normalise ``x``, and the running statistics move as ``layer`` would
    move them over the ``N`` rows (momentum, unbiased variance ``* N / (N - 1)``). ``N``
    must be at least 2 (the caller checks, on the host: reading it here would wait on the
    device once a layer)."""
    n = counts.sum()
    weights = counts / n
    mean = weights @ x
    centred = x - mean
    var = weights @ centred.square()
    if layer.track_running_stats and layer.running_mean is not None:
        with torch.no_grad():
            assert layer.running_var is not None and layer.num_batches_tracked is not None
            layer.num_batches_tracked.add_(1)
            momentum = layer.momentum
            if momentum is None:  # cumulative moving average, as nn.BatchNorm1d
                momentum = 1.0 / float(layer.num_batches_tracked)
            layer.running_mean.lerp_(mean.detach(), momentum)
            layer.running_var.lerp_(var.detach() * (n / (n - 1)), momentum)
    scale = torch.rsqrt(var + layer.eps)
    if not layer.affine:
        return centred * scale
    return torch.addcmul(layer.bias, centred, scale * layer.weight)


@EMBEDDINGS.register("dhe")
class DHEEmbedding(EmbeddingMethod):
    """DHE (Kang et al., KDD 2021, https://arxiv.org/abs/2010.10784): k hashes of the id,
    a dense encoding in [-1, 1], decoded to the embedding by a deep MLP, no table.

    Training: the network is dense and the DENSE optimizer trains it (it is neither fused
    nor sparse: :meth:`RecModel.dense_parameters` hands it to the dense optimizer, with the
    dense learning rate); its optimizer state therefore lives in the dense optimizer and
    ``memory().optimizer`` is 0 (the memory task reports it as dense optimizer state).
    Batch norm normalises over the ``B * F`` encodings of a training batch; the network
    decodes each distinct key once, in training as in evaluation (a batch of Zipf ids holds
    about 0.4 distinct keys per lookup on criteo-synth's standard profile).

    Memory: ``parameters`` = the network's weights, biases and batch-norm scales;
    ``auxiliary`` = hash coefficients ``[2, k]``, feature offsets ``[F]`` and the batch-norm
    running statistics. FLOPs per example: ``F`` network forwards, a training step's (2 per
    multiply-add of every linear layer; the hashing, batch norm and activations are not
    counted, as the suite counts no elementwise work), an upper bound: each distinct key of
    a batch is decoded once.
    """

    Options = DHEOptions

    def __init__(self, options: DHEOptions, context: EmbeddingContext) -> None:
        super().__init__()
        self.options = options
        self.dim = options.dim
        self.num_features = len(context.cardinalities)
        seed = context.seed if options.seed is None else options.seed
        offsets = [0]
        for n in context.cardinalities[:-1]:
            offsets.append(offsets[-1] + n)
        self.register_buffer("offsets", torch.tensor(offsets, dtype=torch.int64))
        self.register_buffer("coefficients", dhe_coefficients(options.k, seed))
        self.network = dhe_network(options)
        self._init(context.seed)
        self.to(context.device)

    @torch.no_grad()
    def _init(self, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        for layer in self.network:
            if not isinstance(layer, nn.Linear):
                continue
            if self.options.init == "reference":  # Glorot uniform, zero bias
                bound = math.sqrt(6.0 / (layer.in_features + layer.out_features))
                layer.weight.copy_(torch.rand(layer.weight.shape, generator=generator) * 2 - 1)
                layer.weight.mul_(bound)
                layer.bias.zero_()
            else:  # nn.Linear's defaults: uniform in ±1/sqrt(fan_in), weight and bias
                bound = 1.0 / math.sqrt(layer.in_features)
                for p in (layer.weight, layer.bias):
                    p.copy_((torch.rand(p.shape, generator=generator) * 2 - 1) * bound)

    def distinct_codes(self, sparse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``sparse [B, F]`` -> the dense hash encoding of each distinct key of the batch,
        ``[U, k]`` float32, and ``inverse [B, F]`` (the row of each lookup's key). The
        encoding is elementwise in the key, so hashing each key once gives exactly the
        values of hashing every lookup (4-6x less time on Zipf-distributed ids, where a
        batch repeats its hot keys)."""
        keys, inverse = torch.unique(sparse + self.offsets, return_inverse=True)
        hashes = dhe_hashes(keys, self.coefficients, self.options.buckets)
        return dhe_transform(hashes, self.options.buckets, self.options.distribution), inverse

    def encode(self, sparse: torch.Tensor) -> torch.Tensor:
        """``sparse [B, F] -> [B, F, k]`` float32: the dense hash encoding of every lookup."""
        codes, inverse = self.distinct_codes(sparse)
        return codes[inverse]

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        """``sparse [B, F] -> [B, F, dim]``: the network decodes each distinct key of the
        batch once and every lookup gathers its key's row. In training, batch norm's
        statistics are those of all ``B * F`` lookups, each distinct key weighted by its
        count in the batch (:func:`counted_batch_norm`), as decoding every lookup gives them
        (equal up to float rounding); in evaluation it reads its running statistics."""
        codes, inverse = self.distinct_codes(sparse)
        if not self.training:
            return self.network(codes)[inverse]
        if sparse.numel() < 2:
            raise ValueError("batch norm needs more than one lookup per channel in training")
        counts = torch.bincount(inverse.reshape(-1), minlength=len(codes)).to(codes.dtype)
        out = codes
        for layer in self.network:
            if isinstance(layer, nn.BatchNorm1d):
                out = counted_batch_norm(layer, out, counts)
            else:
                out = layer(out)
        return out[inverse]

    def decode_every_lookup(self, sparse: torch.Tensor) -> torch.Tensor:
        """``sparse [B, F] -> [B, F, dim]`` as the paper computes it: the network on each of
        the ``B * F`` lookups' encodings (batch norm, in training, over all of them): the
        reference that :meth:`forward` equals up to float rounding, at more cost."""
        codes = self.encode(sparse).reshape(-1, self.options.k)
        return self.network(codes).view(*sparse.shape, self.dim)

    # ----------------------------------------------------------------- storage
    def storage_tensors(self) -> dict[str, list[torch.Tensor]]:
        return {
            "parameters": list(self.network.parameters()),
            "auxiliary": [self.coefficients, self.offsets, *self.network.buffers()],
            "optimizer": [],
        }

    def flops_per_example(self) -> int:
        linear = sum(
            2 * m.in_features * m.out_features for m in self.network if isinstance(m, nn.Linear)
        )
        return self.num_features * linear

    def layout(self) -> dict[str, Any]:
        """Encoding width, buckets, distribution and the network's widths."""
        return {
            "k": self.options.k,
            "buckets": self.options.buckets,
            "distribution": self.options.distribution,
            "widths": [self.options.k, *self.options.hidden, self.dim],
        }

    def checkpoint_state(self) -> dict[str, torch.Tensor]:
        """Hash coefficients, offsets and the network's state (weights, batch-norm
        statistics); its optimizer state is the dense optimizer's, checkpointed with it."""
        return {k: v.detach() for k, v in self.state_dict().items()}

    def load_checkpoint_state(self, tensors: dict[str, torch.Tensor]) -> None:
        device = self.coefficients.device
        self.load_state_dict({k: v.to(device) for k, v in tensors.items()})

    # the width w: k = 2w hashes and four hidden layers of 2w (the paper's equal widths,
    # k of the order of d_NN). No table, so its bytes do not grow with the ids; its dense
    # weights train under the dense optimizer, whose state (as for every dense layer) is
    # not embedding memory
    options_at_budget = knob_hook(
        "dhe",
        lambda dim, w: {"dim": dim, "k": 2 * int(w), "hidden": [2 * int(w)] * 4},
        1,
        1024,
        integer=True,
    )
