"""Each job records the device and node it ran on, and the report's machine row names them:
two local workers over logical GPUs record one GPU each, and a reproduction spread over
devices or nodes says how many jobs ran where."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from suite.environment import job_device, listed_gpus, node_name
from suite.executors.base import Needs
from suite.executors.local import LocalExecutor, visible_gpus
from suite.reproduce.report import machine_text, placement_text


def recorded_device(_: int) -> str:
    from suite.environment import environment

    return str(environment("cuda")["job_device"])


def one_gpu(_: int) -> Needs:
    return Needs(cpus=1, gpus=1)


def test_two_cuda_workers_record_the_gpu_each_was_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    seen = [device for _, device in LocalExecutor(2).run(list(range(4)), recorded_device, one_gpu)]
    assert sorted(set(seen)) == ["cuda:3", "cuda:5"]


def test_a_process_names_its_device_and_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    assert job_device("cuda") == "cuda:7" and job_device("cpu") == "cpu"
    assert node_name() and "/ray:" not in node_name()  # no Ray here


def test_the_visible_gpus_are_parsed_once_for_workers_and_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``-1`` and blanks list no GPU, for the pool that hands GPUs out and for the device a
    job records alike (one parse: ``suite.environment.listed_gpus``)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", " 2, ,4")
    assert visible_gpus() == ["2", "4"] and job_device("cuda") == "cuda:2"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert visible_gpus() == [] and job_device("cuda") != "cuda:-1"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert listed_gpus() is None


def reproduction(environments: list[dict[str, Any]]) -> Any:
    """What machine_text reads of a reproduction: papers -> runs -> results -> environment."""
    results = {i: SimpleNamespace(environment=e) for i, e in enumerate(environments)}
    return SimpleNamespace(papers=[SimpleNamespace(runs={"r": SimpleNamespace(results=results)})])


ENV = {"cpu_model": "AMD EPYC", "threads": 1}


def test_the_machine_row_names_each_jobs_device() -> None:
    gpus = [{**ENV, "node": "box", "job_device": f"cuda:{d}"} for d in (3, 5, 3, 5, 5)]
    assert machine_text(reproduction(gpus), ENV) == (
        "AMD EPYC, 1 torch thread(s); jobs on cuda:3 (2), cuda:5 (3)"
    )
    nodes = [{**ENV, "node": n, "job_device": "cpu"} for n in ("a/ray:1", "b/ray:2", "b/ray:2")]
    assert placement_text(nodes) == "jobs on cpu of a/ray:1 (1), cpu of b/ray:2 (2)"


def test_one_cpu_or_runs_stored_before_say_nothing_more() -> None:
    one = [{**ENV, "node": "box", "job_device": "cpu"}] * 3
    assert machine_text(reproduction(one), ENV) == "AMD EPYC, 1 torch thread(s)"
    assert placement_text([ENV, ENV]) == ""  # no job_device: stored before it was kept
    assert placement_text([{**ENV, "node": "box", "job_device": "cuda:0"}]) == (
        "jobs on cuda:0 (1)"
    )
