"""Issue 14, data side: bad input, faults and interruption on the prepare/load path.

Each test drives the real prepare (pyarrow parse, spill, vocabularies, writer) on raw files
written here, or a real subprocess killed at the worst moment; nothing is mocked.
"""

from __future__ import annotations

import itertools
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import suite.data.duplicates as duplicates
import suite.data.pipeline as pipeline
from suite.cli import main
from suite.config import build_config
from suite.data.integrity import column_ranges
from suite.data.prepared import FORMAT_VERSION, load_prepared
from suite.data.source import get_prepared, prepared_dir
from suite.errors import DataError
from suite.fileio import write_text_atomic
from suite.runs.single import execute
from tests.conftest import tiny_config
from tests.test_datasets_avazu import HEADER
from tests.test_datasets_avazu import row as avazu_row
from tests.test_datasets_criteo import row, write
from tests.test_datasets_movielens import ml100k


def criteo_spec(raw: Path, protocol: str = "random-811", **options: object):
    return build_config(
        components={"dataset": "criteo-kaggle"},
        values={"dataset.raw": str(raw), "dataset.protocol": protocol},
        overrides=[f"dataset.options.{k}={v}" for k, v in options.items()],
    ).dataset


def criteo_lines(n: int, seed: int = 0) -> list[str]:
    """``n`` random Criteo rows (CTR 0.3), distinct in practice (C4 has 2^31 values)."""
    rng = np.random.default_rng(seed)
    return [
        row(
            int(rng.random() < 0.3),
            {1: int(rng.integers(0, 50))},
            {3: f"{rng.integers(99):08x}", 4: f"{rng.integers(1 << 31):08x}"},
        )
        for _ in range(n)
    ]


# --- item 1: every split holds both labels --------------------------------------------------


def test_three_rows_give_an_empty_split_and_fail_naming_it(tmp_path: Path) -> None:
    raw = write(tmp_path / "train.txt", [row(1), row(0), row(1)])
    with pytest.raises(DataError, match=r"split val has 0 rows \(0 positive, 0 negative\)"):
        get_prepared(criteo_spec(raw), progress=False, rebuild=True)
    assert not prepared_dir(criteo_spec(raw)).exists()


def test_a_split_of_one_label_fails_and_min_split_rows_is_an_option(tmp_path: Path) -> None:
    raw = write(tmp_path / "train.txt", [row(0, {1: i}) for i in range(40)])
    with pytest.raises(DataError, match=r"split train has 32 rows \(0 positive, 32 negative\)"):
        get_prepared(criteo_spec(raw), progress=False, rebuild=True)
    raw = write(tmp_path / "train.txt", criteo_lines(200))
    assert len(get_prepared(criteo_spec(raw), progress=False, rebuild=True).split("val")) == 20
    with pytest.raises(DataError, match=r"split val has 20 rows .* at least 50 rows"):
        get_prepared(criteo_spec(raw, min_split_rows=50), progress=False, rebuild=True)


# --- item 3: another raw file into an existing slot ------------------------------------------


def test_other_sources_into_a_slot_are_refused_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a").mkdir()
    first = write(tmp_path / "a" / "train.txt", criteo_lines(300, seed=1))
    kept = get_prepared(criteo_spec(first), progress=False, rebuild=True)
    assert get_prepared(criteo_spec(first), progress=False, rebuild=True).fingerprint == (
        kept.fingerprint
    )  # the same file again is fine
    (tmp_path / "b").mkdir()
    lines = criteo_lines(300, seed=2)
    second = write(tmp_path / "b" / "train.txt", [*lines, "not a criteo row"])
    sha = kept.manifest["sources"][0]["sha256"][:12]
    # refused before reading (a file of another size), so not the bad last row's error
    with pytest.raises(DataError, match=rf"refusing to replace it with data from {second} \("):
        get_prepared(criteo_spec(second), progress=False, rebuild=True)
    second = write(tmp_path / "b" / "train.txt", lines)
    with pytest.raises(
        DataError, match=rf"holds criteo-kaggle prepared from train.txt .*{sha}.*--force"
    ):
        get_prepared(criteo_spec(second), progress=False, rebuild=True)
    assert get_prepared(criteo_spec(first), progress=False).fingerprint == kept.fingerprint

    with pytest.raises(DataError, match=r"but .* was prepared from a train.txt of \d+ bytes"):
        get_prepared(criteo_spec(second), progress=False)  # a run naming the other file
    base = ["prepare", "criteo-kaggle", "--raw", str(second), "--protocol", "random-811", "--quiet"]
    assert main(base) != 0
    assert "--force" in capsys.readouterr().err
    assert main([*base, "--force"]) == 0
    replaced = get_prepared(criteo_spec(second), progress=False)
    assert replaced.fingerprint != kept.fingerprint


# --- items 4 and 10: corrupted arrays are refused at load, by run too -------------------------


def _synth() -> tuple[object, Path]:
    config = tiny_config()
    data = get_prepared(config.dataset, progress=False)
    assert data.path is not None
    return config, data.path


@pytest.mark.parametrize(
    ("name", "corrupt", "message"),
    [
        ("train.sparse.i32", "id", r"column C3 holds id 999999 at row 5, outside its vocabulary"),
        ("train.label.f32", "label", r"label 7\.0 at row 5 \(labels must be 0 or 1\)"),
        ("val.dense.f32", "nan", r"non-finite value nan in dense column I1 at row 5"),
    ],
)
def test_an_array_overwritten_at_the_same_size_is_refused(
    name: str, corrupt: str, message: str
) -> None:
    config, path = _synth()
    target = path / name
    size = target.stat().st_size
    array = np.fromfile(target, dtype=np.int32 if "sparse" in name else np.float32)
    if corrupt == "id":
        array.reshape(-1, 26)[5, 2] = 999_999
    elif corrupt == "label":
        array[5] = 7.0
    else:
        array.reshape(-1, 13)[5, 0] = np.nan
    with open(target, "r+b") as handle:  # in place: same size, same inode
        handle.write(array.tobytes())
    assert target.stat().st_size == size
    with pytest.raises(DataError, match=rf"{target}: content does not match .*{message}"):
        load_prepared(path)
    with pytest.raises(DataError, match=message):
        execute(config)  # `suite run` (and leaderboard verify, through get_prepared) refuse it


def test_a_manifest_range_past_the_vocabulary_is_one_line() -> None:
    _, path = _synth()
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["ranges"]["train"]["sparse_max"][4] = manifest["schema"]["cardinalities"][4]
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=r"split train column C5 holds ids 0\.\.\d+, outside"):
        load_prepared(path)


def test_an_older_format_is_refused_in_one_line(tmp_path: Path) -> None:
    config, path = _synth()
    fingerprint = load_prepared(path).fingerprint
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["format_version"] = 1
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        DataError, match=rf"prepared in format 1, this suite reads format {FORMAT_VERSION}; run"
    ):
        load_prepared(path)
    # generated data is simply made again (same fingerprint); raw data must be prepared
    assert get_prepared(config.dataset, progress=False).fingerprint == fingerprint
    raw = write(tmp_path / "train.txt", criteo_lines(200))
    data = get_prepared(criteo_spec(raw), progress=False, rebuild=True)
    manifest = json.loads((data.path / "manifest.json").read_text())
    manifest["format_version"] = 1
    (data.path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match="prepared in format 1"):
        get_prepared(criteo_spec(raw), progress=False)
    assert get_prepared(criteo_spec(raw), progress=False, rebuild=True).fingerprint == (
        data.fingerprint
    )


# --- item 5: duplicates -----------------------------------------------------------------------


@pytest.mark.parametrize("search_below", [0.0, 1.0], ids=["sort-every-row", "search-repeats"])
def test_duplicates_are_counted_warned_and_dropped(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    search_below: float,
) -> None:
    monkeypatch.setattr(duplicates, "SEARCH_REPEATS_BELOW", search_below)
    distinct = criteo_lines(90, seed=3)
    assert len(set(distinct)) == 90
    raw = write(tmp_path / "train.txt", [line for line in distinct for _ in range(12)])
    data = get_prepared(criteo_spec(raw), progress=False, rebuild=True)
    dup = data.manifest["duplicates"]
    assert dup["duplicate_rows"] == 90 * 11 and dup["dropped"] is False
    # 864 train rows hold all 90 distinct rows; every val/test row is a copy of a train row
    assert dup["within_split"]["train"] == len(data.split("train")) - 90
    assert dup["across_splits"] == {
        "val_in_train": len(data.split("val")),
        "test_in_train_or_val": len(data.split("test")),
    }
    assert "990 rows repeat an earlier row exactly" in capsys.readouterr().err
    assert any("dedupe=true" in w for w in data.manifest["warnings"])

    # dedupe keeps the first copy (train first): here every val/test row was a leak, so the
    # emptied splits fail; on a file with a few repeated rows it keeps each row once
    with pytest.raises(DataError, match="split val has 0 rows"):
        get_prepared(criteo_spec(raw, dedupe="true"), progress=False, rebuild=True)
    distinct = criteo_lines(400, seed=4)
    raw = write(tmp_path / "train.txt", distinct + distinct[:40] * 5)
    deduped = get_prepared(
        criteo_spec(raw, dedupe="true"), progress=False, rebuild=True, force=True
    )
    assert deduped.manifest["duplicates"]["duplicate_rows"] == 200
    assert sum(deduped.manifest["rows"].values()) == 400
    assert deduped.manifest["dropped_rows"] == 200
    rows = np.concatenate(
        [
            np.concatenate(
                [
                    np.asarray(s.dense),
                    np.asarray(s.sparse, dtype=np.float32),
                    np.asarray(s.label)[:, None],
                ],
                axis=1,
            )
            for s in deduped.splits.values()
        ]
    )
    assert len(np.unique(rows, axis=0)) == 400  # every kept row distinct, none lost


def test_row_hashes_tell_rows_apart_by_any_one_value() -> None:
    from suite.data.duplicates import row_hashes

    rng = np.random.default_rng(0)
    n, num_dense, num_sparse = 400, 3, 4
    label = (rng.random(n) < 0.5).astype(np.float32)
    dense = rng.random((n, num_dense)).astype(np.float32)
    keys = [rng.integers(0, 2**64 - 1, 50, dtype=np.uint64) for _ in range(num_sparse)]
    local = rng.integers(-1, 50, (n, num_sparse)).astype(np.int32)
    base = row_hashes(label, dense, local, keys)
    assert len(np.unique(base)) == n  # no collision among distinct random rows
    # rows equal in value hash alike, whatever their chunk-local indices
    shuffled = [np.roll(k, 1) for k in keys]
    relocal = np.where(local < 0, -1, (local + 1) % 50).astype(np.int32)
    assert np.array_equal(row_hashes(label, dense, relocal, shuffled), base)
    # a change in any single value (label, one dense bit, one key, a missing key) moves it
    for change in range(1 + num_dense + num_sparse):
        other_label, other_dense, other_local = label.copy(), dense.copy(), local.copy()
        if change == 0:
            other_label[0] = 1 - other_label[0]
        elif change <= num_dense:
            other_dense[0, change - 1] = np.nextafter(other_dense[0, change - 1], 2)
        else:
            f = change - 1 - num_dense
            other_local[0, f] = -1 if other_local[0, f] >= 0 else 0
        hashed = row_hashes(other_label, other_dense, other_local, keys)
        assert hashed[0] != base[0] and np.array_equal(hashed[1:], base[1:]), change
    # the same value in another column is another row
    swapped = local.copy()
    swapped[:, [0, 1]] = swapped[:, [1, 0]]
    same_keys = [keys[0]] * num_sparse
    assert (
        row_hashes(label, dense, swapped, same_keys) != row_hashes(label, dense, local, same_keys)
    )[local[:, 0] != local[:, 1]].all()


def test_movielens_counts_ratings_whose_user_or_item_is_unknown(tmp_path: Path) -> None:
    directory = ml100k(tmp_path)
    extra = "".join(
        f"{u}\t{i}\t{r}\t{t}\n" for u, i, r, t in [(9, 1, 5, 50), (1, 77, 1, 60), (9, 78, 4, 70)]
    )
    with open(directory / "u.data", "a") as handle:
        handle.write(extra)
    spec = build_config(
        components={"dataset": "movielens"},
        values={"dataset.raw": str(directory), "dataset.protocol": "random-811"},
        overrides=["dataset.options.both_labels=false", "dataset.options.min_split_rows=0"],
    ).dataset
    data = get_prepared(spec, progress=False, rebuild=True)
    assert data.manifest["ratings_unmatched_in_side_files"] == {"users": 2, "items": 2}
    assert any("2 ratings name a user absent" in w for w in data.manifest["warnings"])


# --- items 6 and 11: stale work folders, modes, a crash between the renames --------------------


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_stale_work_folders_of_dead_prepares_are_removed(tmp_path: Path) -> None:
    raw = write(tmp_path / "train.txt", criteo_lines(200))
    spec = criteo_spec(raw)
    parent = prepared_dir(spec).parent
    parent.mkdir(parents=True)
    dead, live = _dead_pid(), os.getppid()
    stale = [f".x.spill-{dead}-abc", f".{prepared_dir(spec).name}.tmp-{dead}-q", ".y.spill-legacy1"]
    kept = [f".x.spill-{live}-abc"]
    for name in stale + kept:
        (parent / name).mkdir()
        (parent / name / "blob").write_bytes(b"x" * 1000)
    os.utime(parent / ".y.spill-legacy1", (1, 1))
    get_prepared(spec, progress=False, rebuild=True)
    assert sorted(p.name for p in parent.iterdir() if p.name.startswith(".")) == kept


@pytest.mark.parametrize(
    ("umask", "folder", "file"), [(0o022, 0o755, 0o644), (0o077, 0o700, 0o600)]
)
def test_published_folders_and_files_follow_the_umask(
    tmp_path: Path, umask: int, folder: int, file: int
) -> None:
    previous = os.umask(umask)
    try:
        _, path = _synth()
        written = write_text_atomic(tmp_path / "results" / "r.json", "{}")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == folder
    assert stat.S_IMODE((path / "train.dense.f32").stat().st_mode) == file
    assert stat.S_IMODE((path / "manifest.json").stat().st_mode) == file
    assert stat.S_IMODE(written.stat().st_mode) == file


def test_a_prepare_killed_between_the_two_renames_loses_nothing(tmp_path: Path) -> None:
    config, path = _synth()
    fingerprint = load_prepared(path).fingerprint
    # a second prepare of the same slot dies (SIGKILL-like os._exit) right after moving the
    # old arrays aside, before the new ones are renamed in
    script = textwrap.dedent(
        """
        import os
        from tests.conftest import tiny_config
        from suite.data.source import get_prepared
        real = os.replace
        def replace(src, dst):
            real(src, dst)
            if ".old-" in str(dst):
                os._exit(9)
        os.replace = replace
        get_prepared(tiny_config().dataset, progress=False, rebuild=True)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-c", script], env=env, check=False)
    assert done.returncode == 9
    assert not path.exists()
    assert [p.name for p in path.parent.iterdir() if ".old-" in p.name]
    assert get_prepared(config.dataset, progress=False).fingerprint == fingerprint
    get_prepared(config.dataset, progress=False, rebuild=True)
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


# --- item 7: dlrm on a small file -------------------------------------------------------------


def test_dlrm_protocol_warns_that_a_small_file_has_no_days(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = write(tmp_path / "train.txt", criteo_lines(700))
    data = get_prepared(criteo_spec(raw, "dlrm"), progress=False, rebuild=True)
    assert any(
        "this file has 700 rows, so its slices are not days" in w for w in data.manifest["warnings"]
    )
    assert "warning: the dlrm protocol" in capsys.readouterr().err


# --- item 12 and 15: numbers, BOM, full paths --------------------------------------------------


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("1\t2\tnan\t100", "rating must be a finite number >= 0"),
        ("1\t2\tinf\t100", "rating must be a finite number >= 0"),
        ("1\t2\t-3\t100", "rating must be a finite number >= 0"),
        ("1\t2\t4\t", "missing timestamp"),
    ],
)
def test_movielens_rejects_non_finite_ratings_and_empty_timestamps(
    tmp_path: Path, line: str, reason: str
) -> None:
    directory = ml100k(tmp_path)
    with open(directory / "u.data", "a") as handle:
        handle.write(line + "\n")
    spec = build_config(
        components={"dataset": "movielens"}, values={"dataset.raw": str(directory)}
    ).dataset
    with pytest.raises(DataError, match=rf"^{directory / 'u.data'}:11: {reason}$"):
        get_prepared(spec, progress=False, rebuild=True)


def test_a_bom_is_skipped_with_or_without_a_header(tmp_path: Path) -> None:
    lines = criteo_lines(200)
    (tmp_path / "plain").mkdir()
    (tmp_path / "bom").mkdir()
    plain = write(tmp_path / "plain" / "train.txt", lines)
    bom = tmp_path / "bom" / "train.txt"
    bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    a = get_prepared(criteo_spec(plain), progress=False, rebuild=True)
    b = get_prepared(criteo_spec(bom), progress=False, rebuild=True, force=True)
    assert a.fingerprint == b.fingerprint and sum(b.manifest["rows"].values()) == 200

    rng = np.random.default_rng(0)
    rows = [avazu_row(i, int(rng.random() < 0.3), "14102100") for i in range(200)]
    (tmp_path / "avazu").mkdir()
    with_bom = tmp_path / "avazu" / "train.csv"
    with_bom.write_bytes(b"\xef\xbb\xbf" + (HEADER + "\n" + "\n".join(rows) + "\n").encode())
    spec = build_config(
        components={"dataset": "avazu"}, values={"dataset.raw": str(with_bom)}
    ).dataset
    assert sum(get_prepared(spec, progress=False, rebuild=True).manifest["rows"].values()) == 200


def test_criteo_errors_name_the_full_path(tmp_path: Path) -> None:
    lines = criteo_lines(50)
    lines[9] = row(0, {2: "oops"})
    raw = write(tmp_path / "train.txt", lines)
    with pytest.raises(DataError, match=rf"^{raw}:10: column I2"):
        get_prepared(criteo_spec(raw), progress=False, rebuild=True)


def test_bars_dense_values_must_be_finite_with_path_and_line(tmp_path: Path) -> None:
    header = ["label", *(f"I{i}" for i in range(1, 14)), *(f"C{i}" for i in range(1, 27))]
    directory = tmp_path / "Criteo_x1"
    directory.mkdir()
    for name in ("train", "valid", "test"):
        rows = [
            ",".join([str(i % 2), "0.5", *["0.1"] * 12, *(str(14 + c) for c in range(26))])
            for i in range(4)
        ]
        if name == "valid":
            rows[2] = rows[2].replace("0.5", "inf", 1)
        (directory / f"{name}.csv").write_text(",".join(header) + "\n" + "\n".join(rows) + "\n")
    spec = build_config(
        components={"dataset": "bars-criteo-x1"}, values={"dataset.raw": str(directory)}
    ).dataset
    with pytest.raises(
        DataError, match=rf"^{directory / 'valid.csv'}:4: I1 must be a finite number$"
    ):
        get_prepared(spec, progress=False, rebuild=True)


def test_readme_names_movielens_variants_and_run_flags_as_accepted() -> None:
    from typing import get_args

    from suite.datasets.movielens import MovieLensOptions

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    (row_,) = [line for line in readme.splitlines() if line.startswith("| `movielens` |")]
    for variant in get_args(MovieLensOptions.model_fields["variant"].annotation):
        assert f"`{variant}`" in row_
    assert "`ml-1m`" not in row_
    assert "--set dataset.options.variant=1m" in readme and "--set variant=1m" in readme
    assert "| `--protocol NAME` |" in readme and "| `--quiet` |" in readme


def test_a_cache_folder_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    raw = write(tmp_path / "train.txt", criteo_lines(200))
    (tmp_path / "afile").write_text("")
    spec = build_config(
        components={"dataset": "criteo-kaggle"},
        values={"dataset.raw": str(raw), "dataset.cache_dir": str(tmp_path / "afile")},
    ).dataset
    with pytest.raises(DataError, match=r"afile/criteo-kaggle: Not a directory while preparing"):
        get_prepared(spec, progress=False, rebuild=True)


# --- the spill: in memory up to a budget, the rest on files ------------------------------------


def _prepared_contents(data) -> dict[str, object]:
    manifest = {k: v for k, v in data.manifest.items() if k not in ("created", "prepared_at")}
    return {"fingerprint": data.fingerprint, "manifest": json.dumps(manifest, sort_keys=True)}


@pytest.mark.parametrize("dataset", ["criteo-dedupe", "criteo-bad-rows", "avazu-by-day"])
def test_spill_in_memory_on_files_or_both_prepares_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dataset: str
) -> None:
    """Every way the spill can hold a chunk gives the same prepared data: in memory or on
    files, local ids 1, 2 or 4 bytes wide (padded in the ids file), row numbers elided
    where consecutive and kept where skipped bad rows break the run."""
    import suite.data.raw as raw_module

    monkeypatch.setattr(raw_module, "BLOCK_BYTES", 1500)  # many chunks
    if dataset == "criteo-dedupe":
        distinct = criteo_lines(300, seed=5)
        raw = write(tmp_path / "train.txt", distinct + distinct[:30] * 3)

        def build():
            return get_prepared(criteo_spec(raw, dedupe="true"), progress=False, rebuild=True)
    elif dataset == "criteo-bad-rows":
        lines = criteo_lines(300, seed=8)
        for i in range(3, 300, 7):
            lines[i] = "\t".join(lines[i].split("\t")[:20])
        raw = write(tmp_path / "train.txt", lines)

        def build():
            data = get_prepared(criteo_spec(raw, on_bad_rows="skip"), progress=False, rebuild=True)
            assert data.manifest["bad_rows"]["total"] == 43
            return data
    else:
        from tests.test_datasets_avazu import prepare as prepare_avazu
        from tests.test_datasets_avazu import write as write_avazu

        days = ["14102100", "14102205", "14102317", "14102423"]
        raw = write_avazu(tmp_path, [avazu_row(i, i % 2, days[i * 4 // 200]) for i in range(200)])

        def build():
            return prepare_avazu(raw, "by-day")

    spilled: dict[str, list[int]] = {}
    original = pipeline.Spill.add
    widths = itertools.cycle([np.uint8, np.uint16, np.uint32, np.uint16])
    narrow = pipeline.shifted_ids

    def add(self, *args, **kwargs) -> None:
        original(self, *args, **kwargs)
        record = self.records[-1]
        spilled.setdefault(budget_name, []).append(record.file_start)
        elided.setdefault(budget_name, []).append(record.first_row is not None)

    def shifted_ids(local: np.ndarray, num_keys: int) -> np.ndarray:
        return narrow(local, num_keys).astype(next(widths))

    elided: dict[str, list[bool]] = {}
    monkeypatch.setattr(pipeline.Spill, "add", add)
    monkeypatch.setattr(pipeline, "shifted_ids", shifted_ids)
    results = {}
    for budget_name, budget in [("memory", 1 << 40), ("files", 0), ("both", 6000)]:
        monkeypatch.setattr(pipeline, "spill_memory_budget", lambda budget=budget: budget)
        results[budget_name] = _prepared_contents(build())
    starts = {name: np.asarray(s) for name, s in spilled.items()}
    assert (starts["memory"] < 0).all() and (starts["files"] >= 0).all()
    assert (starts["both"] < 0).any() and (starts["both"] >= 0).any()
    assert len(starts["files"]) > 5
    assert all(elided["files"]) == (dataset != "criteo-bad-rows")
    assert any(elided["files"])
    assert results["memory"] == results["files"] == results["both"]


@pytest.mark.parametrize(
    ("num_keys", "dtype"),
    [(1, np.uint8), (255, np.uint8), (256, np.uint16), (65535, np.uint16), (65536, np.uint32)],
)
def test_shifted_ids_take_the_narrowest_type_that_holds_every_key(
    num_keys: int, dtype: type
) -> None:
    local = np.array([-1, 0, num_keys - 1, num_keys // 2, -1], dtype=np.int32)
    shifted = pipeline.shifted_ids(local, num_keys)
    assert shifted.dtype == dtype
    assert shifted.tolist() == [0, 1, num_keys, num_keys // 2 + 1, 0]


def test_manifest_checksums_and_fingerprint_match_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer hashes chunks on a background thread: every file's recorded sha256 and the
    content fingerprint must still be those of the bytes on disk, over many chunks."""
    import hashlib

    import suite.data.prepared as prepared
    import suite.data.raw as raw_module

    monkeypatch.setattr(raw_module, "BLOCK_BYTES", 1500)
    monkeypatch.setattr(prepared, "HASH_QUEUE", 2)
    raw = write(tmp_path / "train.txt", criteo_lines(400, seed=6))
    data = get_prepared(criteo_spec(raw), progress=False, rebuild=True)
    files = data.manifest["files"]
    assert len(files) == 9
    for name, entry in files.items():
        content = (data.path / name).read_bytes()
        assert entry["bytes"] == len(content)
        assert entry["sha256"] == hashlib.sha256(content).hexdigest(), name
    assert data.fingerprint == prepared.content_fingerprint(
        data.path, data.schema, data.manifest["rows"], np.dtype(data.manifest["sparse_dtype"])
    )


def test_hashed_and_sorted_vocabularies_prepare_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Large vocabularies are looked up through hash buckets, small ones by binary search:
    over many chunks both must give every row the same ids."""
    import suite.data.raw as raw_module
    import suite.data.vocab as vocab

    monkeypatch.setattr(raw_module, "BLOCK_BYTES", 1500)
    raw = write(tmp_path / "train.txt", criteo_lines(400, seed=7))
    results = {}
    for layout, hashed_from in [("hashed", 1), ("sorted", 10**9)]:
        monkeypatch.setattr(vocab, "HASHED_LOOKUP_KEYS", hashed_from)
        results[layout] = _prepared_contents(
            get_prepared(criteo_spec(raw), progress=False, rebuild=True)
        )
    assert results["hashed"] == results["sorted"]


def test_the_write_pass_lookahead_keeps_order_and_raises_in_place() -> None:
    """The write pass remaps the next chunk on a thread while it writes this one: results
    arrive in input order, and an error surfaces when its chunk is reached, not before."""
    from suite.data.raw import prefetch

    def square(x: int) -> int:
        if x == 3:
            raise ValueError("chunk 3")
        return x * x

    def ahead(items):
        return prefetch(lambda: map(square, items), depth=1, name="test-remap")

    got = []
    with pytest.raises(ValueError, match="chunk 3"):
        for value in ahead(range(6)):
            got.append(value)
    assert got == [0, 1, 4]
    assert list(ahead([])) == []
    assert list(ahead(range(3))) == [0, 1, 4]


@pytest.mark.parametrize("rows", [1, 63, 64, 65, 1000])
def test_column_ranges_are_numpy_min_and_max(rows: int) -> None:
    values = np.random.default_rng(rows).integers(-50, 10**6, (rows, 26)).astype(np.int32)
    lows, highs = column_ranges(values)
    assert lows.tolist() == values.min(axis=0).tolist()
    assert highs.tolist() == values.max(axis=0).tolist()


@pytest.mark.parametrize("repeats", [0, 1, 30, 5000])
def test_repeated_hashes_marks_exactly_the_rows_whose_hash_recurs(repeats: int) -> None:
    rng = np.random.default_rng(repeats)
    hashes = rng.integers(0, 2**64 - 1, size=20_000, dtype=np.uint64)
    copies = rng.integers(0, len(hashes), size=(repeats, 2))
    hashes[copies[:, 0]] = hashes[copies[:, 1]]
    values, counts = np.unique(hashes, return_counts=True)
    expected = np.isin(hashes, values[counts > 1])
    marked = duplicates._repeated_hashes(hashes)
    # many repeats: every row goes to the exact sort (a superset is still exact)
    assert (marked == expected).all() or (repeats == 5000 and marked.all())
