"""metrics.json "provenance": where, when and from what a run trained."""

from __future__ import annotations

import subprocess
from datetime import datetime

import torch

import minimt.provenance as provenance_module
from minimt.provenance import machine_name, provenance, session, source_commit, utc_now
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


def test_the_first_session_starts_the_run_and_the_last_names_its_machine():
    first = session(torch.device("cpu"))
    last = first | {"started_utc": "2099-01-01T00:00:00Z", "machine": "another CPU"}
    record = provenance([first, last])
    assert record["started_utc"] == first["started_utc"] <= record["ended_utc"]
    assert record["machine"] == "another CPU" and record["sessions"] == [first, last]
    assert record["torch"] == torch.__version__ and record["num_threads"] >= 1
    assert first["machine"] == machine_name(torch.device("cpu")) != ""
    datetime.strptime(utc_now(), "%Y-%m-%dT%H:%M:%SZ")  # UTC, to the second


def test_a_cpu_is_named_with_its_family_model_and_torchs_kernel_set(monkeypatch):
    kernels = torch.backends.cpu.get_cpu_capability()
    info = {"model name": "AMD EPYC", "cpu family": "25", "model": "1"}
    monkeypatch.setattr(provenance_module, "cpu_info", lambda: info)
    named = machine_name(torch.device("cpu"))
    assert named == f"AMD EPYC (family 25, model 1; torch's {kernels} kernels)"
    monkeypatch.setattr(provenance_module, "cpu_info", lambda: {})  # no /proc/cpuinfo
    monkeypatch.setattr(provenance_module.platform, "processor", lambda: "")
    assert machine_name(torch.device("cpu")) == f"unknown (torch's {kernels} kernels)"
