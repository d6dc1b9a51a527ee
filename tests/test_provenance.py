"""metrics.json "provenance": where, when and from what a run trained."""

from __future__ import annotations

import re
import subprocess
from datetime import datetime

import torch

import minimt
import minimt.provenance as provenance_module
from minimt.provenance import (
    PLAN_VARIABLE,
    describe_machine,
    numerics_environment,
    provenance,
    read_starts,
    record_start,
    session,
    source_commit,
    utc_now,
)
from tests.helpers import REPO


def test_the_commit_is_the_checkouts_and_none_outside_git(tmp_path):
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert source_commit(REPO).removesuffix("+dirty") == head
    assert source_commit(tmp_path) is None


def test_a_dirty_checkout_says_so(tmp_path):
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "a.txt").write_text("one\n")
    git("add", "a.txt")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    assert not source_commit(tmp_path).endswith("+dirty")
    (tmp_path / "untracked.txt").write_text("not part of the code\n")
    assert not source_commit(tmp_path).endswith("+dirty")
    (tmp_path / "a.txt").write_text("two\n")
    assert source_commit(tmp_path).endswith("+dirty")


def test_a_process_records_the_commit_its_code_was_loaded_at(monkeypatch):
    commits = iter(["a" * 40, "b" * 40 + "+dirty"])  # a commit, then an edit, while it trains
    monkeypatch.setattr(provenance_module, "source_commit", lambda: next(commits))
    provenance_module.loaded_commit.cache_clear()
    try:
        first, later = session(torch.device("cpu")), session(torch.device("cpu"))
    finally:
        provenance_module.loaded_commit.cache_clear()
    assert first["commit"] == later["commit"] == "a" * 40


def test_the_first_session_starts_the_run_and_the_last_names_its_machine():
    first = session(torch.device("cpu"))
    last = first | {"started_utc": "2099-01-01T00:00:00Z", "machine": "another CPU"}
    record = provenance([first, last])
    assert record["started_utc"] == first["started_utc"] <= record["ended_utc"]
    assert record["machine"] == "another CPU" and record["sessions"] == [first, last]
    assert record["torch"] == torch.__version__ and record["num_threads"] >= 1
    assert record["cpu"] == first["cpu"] and record["discarded_starts"] == []
    assert first["machine"] == describe_machine(first) != ""
    assert first["from_step"] == 0 and session(torch.device("cpu"), 40)["from_step"] == 40
    datetime.strptime(utc_now(), "%Y-%m-%dT%H:%M:%SZ")  # UTC, to the second


def test_a_cpu_is_recorded_by_vendor_family_model_name_and_torchs_kernel_set(monkeypatch):
    kernels = torch.backends.cpu.get_cpu_capability()
    info = {"model name": "AMD EPYC", "cpu family": "25", "model": "1", "vendor_id": "AuthenticAMD"}
    monkeypatch.setattr(provenance_module, "cpu_info", lambda: info)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    started = session(torch.device("cpu"))
    assert started["cpu"] == {
        "vendor": "AuthenticAMD",
        "family": 25,
        "model": 1,
        "model_name": "AMD EPYC",
        "kernels": kernels,
    }
    assert started["machine"] == f"AMD EPYC (family 25, model 1; torch's {kernels} kernels)"
    monkeypatch.setattr(provenance_module, "cpu_info", lambda: {})  # no /proc/cpuinfo
    monkeypatch.setattr(provenance_module.platform, "processor", lambda: "")
    assert session(torch.device("cpu"))["machine"] == f"unknown (torch's {kernels} kernels)"


def test_the_variables_that_change_numerics_are_recorded_and_a_forced_kernel_set_named():
    environ = {"ATEN_CPU_CAPABILITY": "avx2", "OMP_NUM_THREADS": "1", "MKL_CBWR": "AUTO"}
    environ |= {"HOME": "/root", "PATH": "/bin", "NVIDIA_TF32_OVERRIDE": "0"}
    found = numerics_environment(environ)
    assert found == {
        k: environ[k]
        for k in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "NVIDIA_TF32_OVERRIDE", "OMP_NUM_THREADS")
    }
    record = {"cpu": {"model_name": "AMD EPYC", "family": 26, "model": 2, "kernels": "AVX2"}}
    assert describe_machine(record | {"environment": found}) == (
        "AMD EPYC (family 26, model 2; torch's AVX2 kernels, ATEN_CPU_CAPABILITY=avx2)"
    )
    assert describe_machine({"cpu": {"model_name": "Intel Xeon", "family": 6, "model": 207}}) == (
        "Intel Xeon (family 6, model 207)"
    )
    assert describe_machine({"machine": "AMD EPYC"}) == "AMD EPYC"  # an older record
    assert describe_machine({"gpu": "NVIDIA H100", "cpu": record["cpu"]}) == "NVIDIA H100"


def test_every_start_is_kept_and_a_start_that_led_nowhere_is_named(tmp_path):
    abandoned = session(torch.device("cpu")) | {"started_utc": "2026-11-27T08:00:00Z"}
    record_start(tmp_path, abandoned)
    kept = session(torch.device("cpu"))
    record_start(tmp_path, kept)
    assert read_starts(tmp_path) == [abandoned, kept]
    record = provenance([kept], read_starts(tmp_path))
    assert record["sessions"] == [kept] and record["discarded_starts"] == [abandoned]
    (tmp_path / "starts.json").write_text("[{")  # damaged: an aid, never a reason to stop
    assert read_starts(tmp_path) == []


def test_a_start_replaced_within_the_same_second_is_still_named():
    # a run started again from update 0 at once, on the same machine: two equal start records
    start = session(torch.device("cpu"))
    record = provenance([start], [start, dict(start)])
    assert record["sessions"] == [start] and record["discarded_starts"] == [start]


def test_a_session_names_the_minimt_version_pyproject_gives_and_the_plan_that_started_it(
    monkeypatch,
):
    declared = re.search(r'^version = "(.+)"$', (REPO / "pyproject.toml").read_text(), re.M)[1]
    assert minimt.__version__ == declared
    monkeypatch.delenv(PLAN_VARIABLE, raising=False)
    alone = session(torch.device("cpu"))
    assert alone["minimt"] == declared and "plan" not in alone
    monkeypatch.setenv(PLAN_VARIABLE, "a" * 64)
    planned = session(torch.device("cpu"))
    assert planned["plan"] == "a" * 64
    summary = provenance([alone, planned])
    assert summary["minimt"] == declared and summary["plan"] == "a" * 64
