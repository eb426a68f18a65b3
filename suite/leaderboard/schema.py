"""The submission schema (version 1): one config, at least three seeds, their metrics.

A submission file is untrusted text. It is read with :func:`read_json_file` (at most
``MAX_FILE_BYTES``, strict JSON: no NaN/Infinity, no duplicate keys) and validated by
:class:`Submission` (``extra="forbid"``, strict types, bounded strings). Nothing in it is
ever executed, imported or unpickled.

``config`` is the run's ``RunConfig.identity()`` without its ``seed`` (the part every
seed shares); ``config_hash`` is ``stable_hash(config)``. Seed ``s`` ran the config
``{**config, "seed": s}`` whose hash (``RunConfig.config_hash()``) is that seed's
``config_hash``.

Where the config draws its data per seed (``dataset.options.draw: per_seed``), each seed
trained on its own draw: every ``seeds[i].data_fingerprint`` is that seed's prepared data
and the submission's ``data_fingerprint`` is :func:`draws_digest` of them, so two
submissions on the same draws (same options, same seeds) share a board. Otherwise the seeds
record none (files written before per-seed draws stay byte for byte what they were) and
``data_fingerprint`` is the one data every seed trained on.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import unicodedata
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import urlsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    ValidationError,
    model_serializer,
)

from suite.config import format_validation_error
from suite.errors import SuiteError

SCHEMA_VERSION = 1
MAX_FILE_BYTES = 1_000_000
MIN_SEEDS = 3
MAX_SEEDS = 64
MAX_METRICS = 64
HASH_IN_FILENAME = 12

_BIDI = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}
# Unicode's Default_Ignorable_Code_Point ranges (DerivedCoreProperties.txt): characters
# that render as nothing, so two names holding them look equal but compare different
_DEFAULT_IGNORABLE = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),  # Hangul choseong/jungseong fillers
    (0x17B4, 0x17B5),  # Khmer inherent vowels
    (0x180B, 0x180F),  # Mongolian variation selectors and vowel separator
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),  # Hangul filler
    (0xFE00, 0xFE0F),  # variation selectors
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),  # halfwidth Hangul filler
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),  # tags and variation selectors supplement
)
# blank, but not default-ignorable: drawn as an empty cell
_BLANKS = {chr(0x2800)}


def is_invisible(ch: str) -> bool:
    """Whether the one character ``ch`` draws nothing a reader can tell apart: a
    default-ignorable code point, a format character (category Cf) or a blank filler such
    as U+2800 (Braille pattern blank)."""
    code = ord(ch)
    if ch in _BLANKS or unicodedata.category(ch) == "Cf":
        return True
    return any(low <= code <= high for low, high in _DEFAULT_IGNORABLE)


def normalize_name(text: str) -> str:
    """A name as people read it: NFKC (fullwidth and compatibility forms folded), invisible
    characters (:func:`is_invisible`: zero-width spaces and joiners, soft hyphens, BOM,
    variation selectors, tags, Hangul and Braille fillers) removed, runs of whitespace made
    one space, ends stripped."""
    folded = unicodedata.normalize("NFKC", text)
    visible = "".join(ch for ch in folded if not is_invisible(ch))
    return " ".join(visible.split())


def name_key(text: str) -> str:
    """The key two names are the same person or team under: normalized and case-folded
    (then NFKC and invisible characters once more, which case folding can expose)."""
    return normalize_name(normalize_name(text).casefold())


class SubmissionFileError(SuiteError):
    """A submission file cannot be read as strict JSON within the size limit."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def _no_controls(allow_newlines: bool) -> Any:
    def check(text: str) -> str:
        for ch in text:
            if ch in "\n\t" and allow_newlines:
                continue
            if unicodedata.category(ch) == "Cc" or ch in _BIDI:
                raise ValueError(f"control or bidi character U+{ord(ch):04X} is not allowed")
            if is_invisible(ch):
                raise ValueError(f"invisible character U+{ord(ch):04X} is not allowed")
        if text != text.strip():
            raise ValueError("leading or trailing whitespace is not allowed")
        return text

    return AfterValidator(check)


def _check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    if re.search(r"[\s<>\"'`\\]", url):
        raise ValueError("must not contain whitespace, quotes, backslashes or angle brackets")
    return url


Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$")]
MetricName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_.]{0,63}$")]
Hash16 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{16}$")]
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
RunId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
Version = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9.+_-]{0,63}$")]
Commit = Annotated[str, StringConstraints(pattern=r"^([0-9a-f]{7,40}(-dirty)?|unknown)$")]


def _normalized(text: str) -> str:
    if text != unicodedata.normalize("NFKC", text):
        raise ValueError(
            f"must be in Unicode NFKC form (write {unicodedata.normalize('NFKC', text)!r})"
        )
    return text


ShortText = Annotated[
    str,
    StringConstraints(min_length=1, max_length=100),
    _no_controls(False),
    AfterValidator(_normalized),
]
LongText = Annotated[str, StringConstraints(max_length=256), _no_controls(False)]
Notes = Annotated[str, StringConstraints(max_length=1000), _no_controls(True)]
Url = Annotated[str, StringConstraints(max_length=300), AfterValidator(_check_url)]
Finite = Annotated[float, Field(allow_inf_nan=False)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class MetricSummary(Strict):
    """Mean and sample standard deviation (ddof=1) of one metric over the seeds."""

    mean: Finite
    std: Finite = Field(ge=0)
    higher_is_better: bool


class SeedRun(Strict):
    """One seed's run: its config hash, MLflow run id and metric values, and (data drawn
    per seed only) the fingerprint of the data it trained on."""

    seed: int = Field(ge=-(2**63), lt=2**63)
    config_hash: Hash16
    mlflow_run_id: RunId | None = None
    metrics: dict[MetricName, Finite] = Field(max_length=MAX_METRICS)
    data_fingerprint: Sha256 | None = None

    @model_serializer(mode="wrap")
    def _leave_out_shared_data(self, handler: SerializerFunctionWrapHandler) -> Any:
        # absent unless drawn per seed: the files and content hashes of entries on one
        # draw stay those written before the field existed
        data = handler(self)
        if isinstance(data, dict) and data.get("data_fingerprint") is None:
            data.pop("data_fingerprint", None)
        return data


class Environment(Strict):
    """Software and machine the seeds ran on."""

    suite_version: Version
    git_commit: Commit
    python: Version | None = None
    torch: Version
    fbgemm: Version | None = None
    device: Literal["cpu", "cuda"]
    device_name: LongText
    threads: int = Field(ge=1, le=4096)
    platform: LongText | None = None


PER_SEED = "per_seed"
"""``dataset.options.draw`` of a config whose seeds each draw their own data."""


def draws_per_seed(config: dict[str, Any]) -> bool:
    """Whether ``config`` (a submission's or a result's) draws its data per seed
    (``dataset.options.draw: per_seed``)."""
    dataset = config.get("dataset")
    options = dataset.get("options") if isinstance(dataset, dict) else None
    return isinstance(options, dict) and options.get("draw") == PER_SEED


def draws_digest(fingerprints: dict[int, str]) -> str:
    """The data fingerprint of a submission whose seeds each trained on their own draw:
    the sha256 (64 hex digits) of one ``"<seed>:<fingerprint>\n"`` line per seed, in
    ascending seed order. Equal seeds on equal draws give equal digests."""
    lines = "".join(f"{seed}:{fingerprints[seed]}\n" for seed in sorted(fingerprints))
    return hashlib.sha256(lines.encode()).hexdigest()


class Submission(Strict):
    """One leaderboard entry: a config run with >= 3 seeds and their metrics."""

    schema_version: Literal[1] = SCHEMA_VERSION
    submitter: ShortText
    date: dt.date
    model: Name
    embedding: Name
    dataset: Name
    protocol: Name
    task: Name
    data_fingerprint: Sha256
    config_hash: Hash16
    config: dict[str, Any]
    seeds: list[SeedRun] = Field(min_length=MIN_SEEDS, max_length=MAX_SEEDS)
    metrics: dict[MetricName, MetricSummary] = Field(min_length=1, max_length=MAX_METRICS)
    environment: Environment
    mlflow_parent_run_id: RunId | None = None
    paper: Url | None = None
    notes: Notes | None = None

    @property
    def per_seed_draws(self) -> bool:
        """Whether its seeds record their own data (each trained on its own draw)."""
        return any(run.data_fingerprint is not None for run in self.seeds)

    def seed_fingerprints(self) -> dict[int, str]:
        """Seed -> the fingerprint of the data it trained on (its own, else the shared)."""
        return {run.seed: run.data_fingerprint or self.data_fingerprint for run in self.seeds}

    def canonical_json(self) -> str:
        """Key-sorted compact JSON of the content; its hash names the file."""
        return json.dumps(
            self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=True
        )

    def content_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()

    def to_file_text(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n"

    def filename(self) -> str:
        """``<dataset>-<task>-<model>-<embedding>-<submitter>-<hash12>.json``, sanitized."""
        raw = "-".join((self.dataset, self.task, self.model, self.embedding, self.submitter))
        return f"{slug(raw)}-{self.content_hash()[:HASH_IN_FILENAME]}.json"


FILENAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9.-]{0,100}-[0-9a-f]{12}\.json$")


def slug(text: str, limit: int = 80) -> str:
    """Lower-case ASCII letters, digits and single dashes; never empty."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    out = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")[:limit].strip("-")
    return out or "submission"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in a submission")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def loads_strict(text: str) -> Any:
    """``json.loads`` refusing NaN/Infinity and duplicate keys; errors are ``ValueError``."""
    try:
        return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def read_text_limited(path: Path, limit: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes."""
    try:
        if not path.exists():
            raise SubmissionFileError(path, "does not exist")
        if not path.is_file():
            raise SubmissionFileError(path, "not a regular file")
        size = path.stat().st_size
        if size > limit:
            raise SubmissionFileError(path, f"file is {size} bytes; the limit is {limit}")
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise SubmissionFileError(path, f"cannot read ({exc.strerror})") from None
    if len(data) > limit:
        raise SubmissionFileError(path, f"file is over {limit} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SubmissionFileError(path, f"not UTF-8 (byte {exc.start})") from None


def read_json_file(path: Path, limit: int = MAX_FILE_BYTES) -> Any:
    """Strict JSON from a size-limited file; problems raise ``SubmissionFileError``."""
    text = read_text_limited(path, limit)
    try:
        return loads_strict(text)
    except json.JSONDecodeError as exc:
        raise SubmissionFileError(
            path, f"invalid JSON at line {exc.lineno} column {exc.colno} ({exc.msg})"
        ) from None
    except ValueError as exc:
        raise SubmissionFileError(path, f"invalid JSON ({exc})") from None


ModelT = TypeVar("ModelT", bound=BaseModel)


def load_yaml_model(path: Path, model: type[ModelT]) -> ModelT | None:
    """A leaderboard YAML file (at most :data:`MAX_FILE_BYTES`) validated as ``model``;
    ``None`` when the file is absent. Errors are one line naming the file."""
    if not path.exists():
        return None
    text = read_text_limited(path, MAX_FILE_BYTES)
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise SuiteError(f"{path}: malformed YAML ({exc})") from None
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise SuiteError(f"{path}: {format_validation_error(exc)}") from None
