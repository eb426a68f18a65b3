"""Reproductions on worker processes, their run results stored: resumable, regenerable."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

import pytest

from suite.cli import main
from suite.reproduce.report import comparable
from suite.reproduce.store import LOGITS_DIGEST, NOISE_FILE, RUNS_DIR, write_result
from suite.results import TaskResult
from tests.conftest import TINY_DATA, accuracy_result, tracking_uri

SETS = [f"--set=dataset.options.{k}={v}" for k, v in TINY_DATA.items()]
SETS += ["--set=train.batch_size=128", "--set=train.max_steps=15"]
SETS += ["--set=tracking.log_model=never"]  # not part of a run's identity; saves seconds
AUC_PAIR = ["--paper", "qr", "--claim", "qr-above-hash-2"]  # two runs, DeLong on each seed
ONE_RUN = ["--paper", "dlrm"]  # one run, five seeds


def reproduce(out: Path, uri: str, which: list[str], *extra: str) -> int:
    args = ["reproduce", *which, "--quiet", "--out", str(out), "--tracking-uri", uri, *SETS]
    return main([*args, *extra])


def body(report: str) -> str:
    """The report without timings, run ids and its command row (which names --out); the
    header table's padding follows the command's length."""
    text = re.sub(r"^\| command .*$", "", comparable(report), flags=re.M)
    return re.sub(r"-{3,}", "---", re.sub(r" {2,}", " ", text))


def stored(out: Path) -> dict[str, TaskResult]:
    """``<config hash>/seed-<n>`` -> the stored result."""
    files = sorted((out / RUNS_DIR).glob("*/seed-*.json"))
    return {f"{p.parent.name}/{p.stem}": TaskResult.read(p) for p in files}


def drop_logits(results: dict[str, TaskResult]) -> None:
    """As on another machine or a fresh clone: the kept test logits were never committed."""
    from suite.results import ARRAYS_DETAIL

    for result in results.values():
        Path(result.details[ARRAYS_DETAIL]["file"]).unlink()


def stamps(out: Path, names: Iterable[str]) -> dict[str, int]:
    """``<config hash>/seed-<n>`` -> its stored file's modification time (ns)."""
    return {n: (out / RUNS_DIR / f"{n}.json").stat().st_mtime_ns for n in names}


def figures(result: TaskResult) -> dict[str, float]:
    """A result's metrics that must match bit for bit (measured ones, timings, left out)."""
    from suite.registry import TASKS
    from suite.results import repeatable_metrics

    kept = repeatable_metrics(result.metrics, TASKS.get(result.task).metrics)
    assert "test_auc" in kept
    return kept


def children(uri: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("reproduce-quick")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    return [r for r in runs if "mlflow.parentRunId" in r.data.tags]


def parents(uri: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("reproduce-quick")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    return sorted(
        (r for r in runs if r.data.tags.get("suite.reproduction") == "true"),
        key=lambda r: r.info.start_time,
    )


@pytest.mark.slow  # two spawned workers each import torch and the suite (~15 s on 2 cores)
def test_two_workers_give_the_sequential_metrics_report_and_noise(tmp_path: Path) -> None:
    uri = tracking_uri(tmp_path)
    one, two = tmp_path / "one", tmp_path / "two"
    assert reproduce(one, uri, AUC_PAIR, "--workers", "1") == 0
    assert reproduce(two, uri, AUC_PAIR, "--workers", "2") == 0
    first, second = stored(one), stored(two)
    assert len(first) == 10 and first.keys() == second.keys()  # 2 runs x 5 seeds
    for name, result in first.items():
        assert figures(result) == figures(second[name]), name
        assert result.details[LOGITS_DIGEST] == second[name].details[LOGITS_DIGEST]
        assert result.config_hash == second[name].config_hash
    assert len({r.details[LOGITS_DIGEST] for r in first.values()}) == 10  # seeds do differ
    assert body((one / "REPORT.md").read_text()) == body((two / "REPORT.md").read_text())
    noise = json.loads((one / RUNS_DIR / NOISE_FILE).read_text())
    assert noise == json.loads((two / RUNS_DIR / NOISE_FILE).read_text())
    assert len(noise["pairs"]) == 5 and all(p["variance"] > 0 for p in noise["pairs"])
    # the workers' runs nest under the second parent, which finished
    last = parents(uri)[-1]
    assert last.info.status == "FINISHED"
    nested = [c for c in children(uri) if c.data.tags["mlflow.parentRunId"] == last.info.run_id]
    assert len(nested) == 10 and all(c.info.status == "FINISHED" for c in nested)
    assert sorted({c.data.tags["suite.pid"] for c in nested}) != [last.data.tags["suite.pid"]]


@pytest.mark.slow  # two reproductions (5 + 3 jobs): ~30-70 s on 2 shared cores
def test_a_killed_reproduction_reruns_only_the_missing_and_bad_jobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = tracking_uri(tmp_path)
    out = tmp_path / "report"
    assert reproduce(out, uri, ONE_RUN, "--workers", "1") == 0
    before = stored(out)
    names = sorted(before)
    files = {n: out / RUNS_DIR / f"{n}.json" for n in names}
    (files[names[0]]).unlink()  # killed before it finished
    files[names[1]].write_text('{"schema_version": 1, "task": "acc')  # half-written
    other = json.loads(files[names[2]].read_text())
    other["config_hash"] = "0" * 16  # another config's result
    files[names[2]].write_text(json.dumps(other))
    kept = {n: files[n].stat().st_mtime_ns for n in names[3:]}
    capsys.readouterr()

    assert reproduce(out, uri, ONE_RUN, "--workers", "1") == 0
    err = capsys.readouterr().err
    assert f"{files[names[1]]}: not a stored run result" in err
    assert f"{files[names[2]]}: holds config {'0' * 16}" in err
    assert {n: files[n].stat().st_mtime_ns for n in names[3:]} == kept  # reused, not rewritten
    after = stored(out)
    assert after.keys() == before.keys()
    for name in names:
        shared = figures(after[name]).keys() & figures(before[name]).keys()
        assert {k: after[name].metrics[k] for k in shared} == {
            k: before[name].metrics[k] for k in shared
        }, name
        assert after[name].details[LOGITS_DIGEST] == before[name].details[LOGITS_DIGEST]
    last = parents(uri)[-1]
    nested = [c for c in children(uri) if c.data.tags["mlflow.parentRunId"] == last.info.run_id]
    assert sorted(c.info.run_name for c in nested) == sorted(
        f"dlrm/full seed {n.rsplit('-', 1)[1]}" for n in names[:3]
    )


def test_from_results_regenerates_the_report_without_training(tmp_path: Path) -> None:
    uri = tracking_uri(tmp_path)
    out = tmp_path / "report"
    assert reproduce(out, uri, AUC_PAIR, "--workers", "1") == 0
    trained = (out / "REPORT.md").read_text()
    runs_before = len(children(uri))
    (out / "REPORT.md").unlink()
    for arrays in Path("results/runs").rglob("*.npz"):
        arrays.unlink()  # no predictions: DeLong's figures come from the stored noise
    assert reproduce(out, uri, AUC_PAIR, "--from-results") == 0
    regenerated = (out / "REPORT.md").read_text()
    assert body(regenerated) == body(trained)
    assert "DeLong" in regenerated and "--from-results" in regenerated
    assert len(children(uri)) == runs_before and len(parents(uri)) == 1  # nothing trained

    # results stored before their pair's noise was judged (logits gone, not committed):
    # the report still regenerates, saying the test-set noise is left out
    (out / RUNS_DIR / NOISE_FILE).unlink()
    assert reproduce(out, uri, AUC_PAIR, "--from-results") == 0
    assert "test-set noise left out" in (out / "REPORT.md").read_text()

    victim = sorted((out / RUNS_DIR).glob("*/seed-3.json"))[0]
    victim.unlink()
    assert reproduce(out, uri, AUC_PAIR, "--from-results", str(out)) == 2
    assert len(children(uri)) == runs_before


def test_an_interim_report_judges_only_the_seeds_whose_every_job_is_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reproduction still under way (a curve takes sessions): ``--finished-seeds`` judges
    the seeds none of whose jobs is missing, says the report is interim and names the
    seeds it leaves out; fewer than two finished seeds, or no ``--from-results``, is an
    error."""
    uri = tracking_uri(tmp_path)
    out = tmp_path / "report"
    assert reproduce(out, uri, AUC_PAIR, "--workers", "1") == 0
    left, right = sorted(p for p in (out / RUNS_DIR).iterdir() if p.is_dir())
    (left / "seed-3.json").unlink()  # each of the two runs lacks another seed
    (right / "seed-4.json").unlink()
    assert reproduce(out, uri, AUC_PAIR, "--from-results") == 2
    assert reproduce(out, uri, AUC_PAIR, "--finished-seeds") == 2
    capsys.readouterr()

    assert reproduce(out, uri, AUC_PAIR, "--from-results", "--finished-seeds") == 0
    report = (out / "REPORT.md").read_text()
    assert "**Interim report: 3 of the profile's 5 seeds.**" in report
    assert "0, 1, 2 (every run, paired); not yet trained, left out: 3, 4" in report
    assert "--finished-seeds" in report
    assert "(n=3)" in report and "n=5" not in report  # every interval over the three

    for seed in (1, 2):
        (left / f"seed-{seed}.json").unlink()
    capsys.readouterr()
    assert reproduce(out, uri, AUC_PAIR, "--from-results", "--finished-seeds") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--finished-seeds: 1 of the profile's 5 seeds" in err[0]


def test_from_results_names_the_missing_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert reproduce(tmp_path / "empty", tracking_uri(tmp_path), ONE_RUN, "--from-results") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no stored result for dlrm/full seed 0" in err[0]


def test_rerun_of_a_stored_job_is_identical_and_a_changed_one_is_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = tracking_uri(tmp_path)
    out = tmp_path / "report"
    assert reproduce(out, uri, ONE_RUN, "--workers", "1") == 0
    capsys.readouterr()
    rerun = ["--rerun", "dlrm/full", "--seed", "2"]
    assert reproduce(out, uri, ONE_RUN, *rerun) == 0
    assert "dlrm/full seed 2: identical" in capsys.readouterr().out
    (path,) = (out / RUNS_DIR).glob("*/seed-2.json")
    result = TaskResult.read(path)
    auc = result.metrics["test_auc"]
    result.metrics["test_auc"] = auc + 1e-12
    result.write(path)
    assert reproduce(out, uri, ONE_RUN, *rerun) == 1
    printed = capsys.readouterr().out
    assert f"test_auc: stored {auc + 1e-12!r}, now {auc!r}" in printed
    assert "test logits sha256" not in printed


def test_a_failing_job_leaves_the_parent_run_failed_not_running(tmp_path: Path) -> None:
    uri = tracking_uri(tmp_path)
    Path("blocker").write_text("a file where the results directory should be")
    args = [*ONE_RUN, "--set=tracking.results_dir=blocker/runs"]
    assert reproduce(tmp_path / "report", uri, args, "--workers", "1") == 2
    (parent,) = parents(uri)
    assert parent.info.status == "FAILED" and "blocker" in parent.data.tags["suite.error"]
    assert not list((tmp_path / "report").glob("runs/*/seed-*.json"))


def test_checked_in_profiles_keep_their_runs_and_the_default_directory_is_ignored() -> None:
    import subprocess

    from suite.reproduce.runner import default_report_dir

    repo = Path(__file__).resolve().parents[1]

    def ignored(path: str) -> bool:
        found = subprocess.run(["git", "-C", str(repo), "check-ignore", "-q", path])
        return found.returncode == 0

    assert not ignored("results/quick/runs/0123456789abcdef/seed-0.json")
    assert not ignored("results/quick/runs/noise.json")
    assert ignored(f"{default_report_dir('quick')}/runs/0123456789abcdef/seed-0.json")


def test_a_stored_job_whose_logits_are_gone_trains_again_until_its_noise_is_stored(
    tmp_path: Path,
) -> None:
    """Logits are not committed: on a fresh machine a stored job whose pairs' DeLong noise
    was never judged must train again (same figures) so the noise can be computed; once
    the noise is stored, the job is reused without its logits."""
    uri = tracking_uri(tmp_path)
    out = tmp_path / "report"
    assert reproduce(out, uri, ONE_RUN, "--workers", "1") == 0
    before = stored(out)
    drop_logits(before)
    noise_file = out / RUNS_DIR / NOISE_FILE
    judged = noise_file.read_text()
    noise_file.unlink()
    mtimes = stamps(out, before)

    assert reproduce(out, uri, ONE_RUN, "--workers", "1") == 0
    after = stored(out)
    retrained = stamps(out, mtimes)
    assert all(retrained[n] != t for n, t in mtimes.items())
    for name in before:
        assert after[name].details[LOGITS_DIGEST] == before[name].details[LOGITS_DIGEST]
    assert noise_file.read_text() == judged  # the same noise, computed again

    drop_logits(after)
    mtimes = stamps(out, after)
    assert reproduce(out, uri, ONE_RUN, "--workers", "1") == 0
    assert stamps(out, after) == mtimes


def test_a_job_trained_again_for_its_logits_says_when_its_figures_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stored job from another CPU model rounds differently when it trains again for its
    predictions: the new result replaces it (its noise comes from the new logits) with a
    one-line warning naming the file, both CPUs and the changed test AUC; jobs that come
    back bit for bit the same stay silent."""
    uri = tracking_uri(tmp_path)
    out = tmp_path / "report"
    assert reproduce(out, uri, ONE_RUN, "--workers", "1") == 0
    before = stored(out)
    drop_logits(before)
    (out / RUNS_DIR / NOISE_FILE).unlink()
    name = sorted(before)[0]
    path = out / RUNS_DIR / f"{name}.json"
    true_auc = before[name].metrics["test_auc"]
    elsewhere = before[name].model_copy(deep=True)
    elsewhere.metrics["test_auc"] = true_auc + 0.0014
    elsewhere.environment["cpu_model"] = "Another CPU"
    write_result(out, name.split("/")[0], elsewhere)  # stored as the suite stores a job
    capsys.readouterr()

    assert reproduce(out, uri, ONE_RUN, "--workers", "1") == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "trained again" in line]
    assert len(warnings) == 1
    assert str(path) in warnings[0] and "from Another CPU" in warnings[0]
    assert f"test_auc: stored {true_auc + 0.0014!r}, now {true_auc!r}" in warnings[0]
    assert "replaces it" in warnings[0]
    assert stored(out)[name].metrics["test_auc"] == true_auc


def test_a_stored_job_no_claim_judges_by_its_auc_is_reused_without_its_logits(
    tmp_path: Path,
) -> None:
    """Only jobs whose test AUC a claim judges need their logits for DeLong: a byte-count
    claim's jobs, resumed where their logits are gone, are reused (a resume of the quick
    profile trained its 80 unpaired Wukong and Check-N-Run jobs again before)."""
    uri = tracking_uri(tmp_path)
    out = tmp_path / "report"
    bytes_only = ["--paper", "alpt", "--claim", "alpt-8-parameter-bytes"]
    assert reproduce(out, uri, bytes_only, "--workers", "1") == 0
    before = stored(out)
    assert before and all(LOGITS_DIGEST in r.details for r in before.values())
    drop_logits(before)
    assert (
        not (out / RUNS_DIR / NOISE_FILE).is_file()
        or "pairs" in (out / RUNS_DIR / NOISE_FILE).read_text()
    )
    mtimes = stamps(out, before)

    assert reproduce(out, uri, bytes_only, "--workers", "1") == 0
    assert stamps(out, before) == mtimes


def test_a_new_claim_pairing_a_stored_job_trains_it_again_for_the_new_pairs_noise(
    tmp_path: Path,
) -> None:
    """Mixed-dim's claim pairs md_2 with the hash_2 run QR's claim stored (same config):
    where hash_2's logits are gone, its stored noise covers only the (qr_2, hash_2) pair,
    so hash_2 trains again (same figures) and the new pair gets its test-set noise."""
    from suite.reproduce.store import read_noise

    uri = tracking_uri(tmp_path)
    out = tmp_path / "report"
    assert reproduce(out, uri, AUC_PAIR, "--workers", "1") == 0
    before = stored(out)
    drop_logits(before)
    hashed = {n for n, r in before.items() if r.embedding == "hash"}
    mtimes = stamps(out, before)

    both = ["--paper", "qr", "--paper", "mixed_dim", "--claim", "qr-above-hash-2"]
    assert reproduce(out, uri, [*both, "--claim", "md-above-hash-2"], "--workers", "1") == 0
    after = stored(out)
    retrained = {n for n, t in stamps(out, before).items() if t != mtimes[n]}
    assert retrained == hashed and len(hashed) == 5
    for name in hashed:
        assert after[name].details[LOGITS_DIGEST] == before[name].details[LOGITS_DIGEST]
    md = {n.split("/")[0] for n, r in after.items() if r.embedding == "mixed_dim"}
    (hash_key,) = {n.split("/")[0] for n in hashed}
    noise = read_noise(out)
    assert all((m, hash_key, seed) in noise for m in md for seed in range(5))


def _timed(created: str, duration_s: float) -> TaskResult:
    return accuracy_result(created=created, duration_s=duration_s)


def test_training_wall_time_counts_overlapping_jobs_once_and_resumed_stretches_apart() -> None:
    from suite.reproduce.outcome import training_wall_s

    two_workers = [  # 10:00:00-10:01:40 and 10:00:30-10:02:00 overlap: 120 s of wall time
        _timed("2026-01-01T10:01:40+00:00", 100.0),
        _timed("2026-01-01T10:02:00+00:00", 90.0),
    ]
    resumed = [_timed("2026-01-01T12:00:50+00:00", 50.0)]  # a second invocation, later
    assert training_wall_s(two_workers) == (120.0, 1)
    assert training_wall_s(two_workers + resumed) == (170.0, 2)
    assert training_wall_s([]) == (0.0, 0)


def test_each_job_knows_the_stretch_of_work_it_trained_in() -> None:
    """Jobs whose intervals overlap or nearly touch share a stretch (they were timed side by
    side); a resumed invocation's jobs get the next; a job without a timestamp gets None."""
    from suite.reproduce.outcome import WALL_GAP_S, stretch_of, training_wall_s

    jobs = [
        _timed("2026-01-01T12:00:50+00:00", 50.0),  # resumed, later
        _timed("2026-01-01T10:01:40+00:00", 100.0),
        _timed("2026-01-01T10:02:00+00:00", 90.0),
        _timed("", 10.0),  # no clock
        _timed("2026-01-01T10:04:00+00:00", 120.0 - WALL_GAP_S / 2),  # starts within the gap
    ]
    assert stretch_of(jobs) == [1, 0, 0, None, 0]
    assert max(s for s in stretch_of(jobs) if s is not None) + 1 == training_wall_s(jobs)[1]
    assert stretch_of([]) == []


def test_a_stopped_reproduction_keeps_the_noise_of_the_seeds_it_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C as the third seed starts: the first two seeds' test-set noise is stored with
    their covariance, so a resume where their logits are gone (a fresh clone) trains only
    the other seeds, and the shared variance rests on the seed pairs judged together."""
    from suite.reproduce import runner
    from suite.reproduce.store import read_noise

    real, calls = runner.run_job, []

    def stop_at_the_third_seed(job: runner.Job, parent: str | None) -> TaskResult:
        calls.append(job)
        if len({j.seed for j in calls}) == 3:
            raise KeyboardInterrupt
        return real(job, parent)

    monkeypatch.setattr(runner, "run_job", stop_at_the_third_seed)
    uri, out = tracking_uri(tmp_path), tmp_path / "report"
    which = ["--paper", "dlrm", "--paper", "qr", "--claim", "dlrm-learns-synthetic"]
    which += ["--claim", "qr-above-hash-2"]
    assert reproduce(out, uri, which, "--workers", "1") == 130  # as Ctrl-C
    first, second = calls[0].seed, next(j.seed for j in calls if j.seed != calls[0].seed)
    finished = {(j.key, j.seed) for j in calls[:-1]}
    assert {seed for _, seed in finished} == {first, second} and len(finished) == 6
    noise = read_noise(out)
    assert {seed for *_, seed in noise} == {first, second}
    assert sorted(bool(right) for right in {r for _, r, _ in noise}) == [False, True]
    for (_, _, seed), entry in noise.items():
        other = second if seed == first else first
        assert entry.variance > 0 and set(entry.covariances) == {other}

    for arrays in Path("results/runs").rglob("*.npz"):
        arrays.unlink()  # as on a fresh clone: the logits were never committed
    trained: list[runner.Job] = []
    monkeypatch.setattr(
        runner, "run_job", lambda job, parent: trained.append(job) or real(job, parent)
    )
    assert reproduce(out, uri, which, "--workers", "1") == 0
    assert trained and not {(j.key, j.seed) for j in trained} & finished
    noise = read_noise(out)
    later = {j.seed for j in trained}
    assert len(noise) == 10 and len(later) == 3
    for (_, _, seed), entry in noise.items():
        together = {first, second} if seed in {first, second} else later
        assert set(entry.covariances) == together - {seed}
    report = (out / "REPORT.md").read_text()
    assert "rests on 4 of 10 seed pairs" in report  # 1 pair from the first sitting, 3 after


def test_jobs_run_seed_by_seed_so_a_stop_leaves_whole_seeds() -> None:
    """Claim by claim, a claim's ten seeds had to train in one sitting for its test-set
    noise (the covariance between seeds needs all their predictions at once); seed by seed,
    a stop leaves whole seeds, whose noise is stored, each seed's jobs longest first."""
    from suite.reproduce import runner
    from suite.reproduce.plan import build_plan

    plan = build_plan("quick", ["qr"])
    planned, seeds, jobs = plan.runs, plan.seeds, plan.jobs
    is_qr = {key: planned[key].roles[0].startswith("qr/qr") for key in planned}
    costs = {(j.key, j.seed): 10.0 if is_qr[j.key] else 1.0 for j in jobs}  # QR slower
    ordered = runner.job_order(jobs, costs)

    assert sorted(map(id, ordered)) == sorted(map(id, jobs))
    assert [j.seed for j in ordered] == sorted((j.seed for j in jobs), key=seeds.index)
    for seed in seeds:
        mine = [costs[(j.key, j.seed)] for j in ordered if j.seed == seed]
        assert mine == sorted(mine, reverse=True)
    in_plan = [j for j in jobs if j.seed == seeds[0]]
    assert runner.job_order(jobs, None)[: len(in_plan)] == in_plan


def test_a_resume_finishes_the_seed_a_stop_left_part_way_first() -> None:
    """A stop part way through seed 1 leaves some runs with seeds 0-1 stored and others
    with seed 0 only; the jobs left, run-major, start with a later seed of the first run,
    yet seed 1 must finish before seed 2 starts, so the next stop again leaves whole seeds."""
    from suite.reproduce import runner
    from suite.reproduce.plan import build_plan

    plan = build_plan("quick", ["qr"])
    keys = list(plan.runs)
    assert len(plan.seeds) >= 3 and len(keys) >= 2
    first, second = plan.seeds[0], plan.seeds[1]
    stored = {(keys[0], first), (keys[0], second)} | {(k, first) for k in keys[1:]}
    todo = [j for j in plan.jobs if (j.key, j.seed) not in stored]
    assert todo[0].seed != second  # the first job left is a later seed of the first run
    costs = {(j.key, j.seed): 1.0 for j in todo}

    ordered = runner.job_order(todo, costs, seeds=list(plan.seeds))

    expected = [s for s in plan.seeds if s != first]
    assert list(dict.fromkeys(j.seed for j in ordered)) == expected
    assert [j.seed for j in ordered] == sorted((j.seed for j in todo), key=plan.seeds.index)


def test_reproduction_jobs_log_no_validation_curve_and_keep_their_config_hash() -> None:
    """The curve is MLflow's view of training, which no verdict reads; it is tracking, so
    turning it off leaves every job's config hash (and its stored results) as they were."""
    from suite.reproduce.plan import build_plan

    jobs = build_plan("quick", ["dhe"]).jobs
    assert jobs and all(job.config.tracking.val_curve == 0 for job in jobs)
    for job in jobs:
        with_curve = job.config.with_overrides({"tracking.val_curve": 10})
        assert with_curve.config_hash() == job.config.config_hash()


def curve_smoke_jobs() -> tuple[list[int], list, set, dict[str, str], dict[str, str]]:
    """The curve-smoke profile's ``(seeds, jobs, noise pairs, run id by config hash, budget
    by config hash)`` (``full`` for the reference's budget)."""
    from suite.reproduce.plan import build_plan

    plan = build_plan("curve-smoke", ["compression"])
    planned, seeds, jobs, pairs = plan.runs, plan.seeds, plan.jobs, plan.noise_pairs()
    run_id = {key: planned[key].roles[0].split("/", 1)[1] for key in planned}
    budget = {
        key: rid.rsplit("_at_", 1)[1] if "_at_" in rid else rid for key, rid in run_id.items()
    }
    return seeds, jobs, pairs, run_id, budget


def test_a_seeds_jobs_run_in_the_groups_whose_noise_is_judged_together() -> None:
    """A curve's seed is hours of jobs, and a job's stored result is reused without its
    logits only once the noise of every pair it is in is stored: its methods at one budget
    run as one group (the longest job's group first), so a stop mid-seed keeps whole budgets
    instead of every budget's DHE run and none of its partners."""
    from suite.reproduce import runner

    seeds, jobs, pairs, run_id, budget = curve_smoke_jobs()
    weight = {"dhe": 100.0, "ttrec": 10.0}
    costs = {
        (j.key, j.seed): weight.get(run_id[j.key].split("_at_")[0], 1.0) / float(budget[j.key])
        if budget[j.key].isdigit()
        else 0.5
        for j in jobs
    }

    ordered = runner.job_order(jobs, costs, pairs)
    assert sorted(map(id, ordered)) == sorted(map(id, jobs))
    for seed in seeds:
        mine = [j for j in ordered if j.seed == seed]
        budgets = [budget[j.key] for j in mine]
        runs_of_budgets = [b for i, b in enumerate(budgets) if i == 0 or budgets[i - 1] != b]
        assert sorted(runs_of_budgets) == sorted(set(budgets)), budgets  # each group whole
        assert runs_of_budgets[0] == "4" and runs_of_budgets[-1] == "full"  # DHE at 1/4 first
        for b in set(budgets):
            group = [costs[(j.key, seed)] for j in mine if budget[j.key] == b]
            assert group == sorted(group, reverse=True)
    ungrouped = [budget[j.key] for j in runner.job_order(jobs, costs) if j.seed == seeds[0]]
    assert ungrouped[:2] == ["4", "16"]  # without the pairs: the DHE points first


def test_a_profile_longer_than_a_sitting_runs_each_group_under_every_seed_first() -> None:
    """The curve is about 25 hours on two workers: seed by seed, each sitting would judge
    about one seed alone, and the test set's shared variance (the covariance of two seeds'
    figures, computed only from predictions judged together) would fall back to its upper
    bound. Its profile says ``order: groups``: a budget's methods under every seed, seed by
    seed, before the next budget, the longest group first."""
    from suite.reproduce import runner
    from suite.reproduce.plan import groups_first, select_specs

    assert not groups_first(select_specs(["compression"], "curve-smoke", None), "curve-smoke")
    assert groups_first(select_specs(["compression"], "curve", None), "curve")
    seeds, jobs, pairs, run_id, budget = curve_smoke_jobs()
    costs = {(j.key, j.seed): 100.0 if run_id[j.key] == "dhe_at_16" else 1.0 for j in jobs}

    ordered = runner.job_order(jobs, costs, pairs, by_group=True)
    assert sorted(map(id, ordered)) == sorted(map(id, jobs))
    budgets = [budget[j.key] for j in ordered]
    blocks = [b for i, b in enumerate(budgets) if i == 0 or budgets[i - 1] != b]
    assert sorted(blocks) == sorted(set(budgets)) and blocks[0] == "16"  # longest group first
    for b in set(budgets):
        mine = [j for j in ordered if budget[j.key] == b]
        assert [j.seed for j in mine] == sorted((j.seed for j in mine), key=seeds.index)
        first = [j for j in mine if j.seed == seeds[0]]
        assert [costs[(j.key, j.seed)] for j in first][0] == max(
            costs[(j.key, j.seed)] for j in first
        )
