"""Which Triton kernel="triton" accepts: none, or one older than it is known to run on, is
refused with the installed version and the oldest allowed, before the kernel module (which
imports what only newer Tritons have) is imported. Needs no Triton itself."""

from __future__ import annotations

import importlib.metadata
import importlib.util

import pytest
import torch

from posattn.kernels import table_bias


@pytest.fixture
def installed_triton(monkeypatch):
    """Make `table_bias` see Triton `version` installed (None: not installed)."""

    def install(version: str | None) -> None:
        real_find_spec = importlib.util.find_spec
        monkeypatch.setattr(
            importlib.util,
            "find_spec",
            lambda name, *args: (
                (None if version is None else object())
                if name == "triton"
                else real_find_spec(name, *args)
            ),
        )
        monkeypatch.setattr(importlib.metadata, "version", lambda name: version)
        monkeypatch.setenv("TRITON_INTERPRET", "1")  # the CPU is then a device it serves
        table_bias.too_old_triton.cache_clear()  # read once a process: read this one

    yield install
    table_bias.too_old_triton.cache_clear()  # the real Triton's answer for later tests


@pytest.mark.parametrize("version", ["3.3.1", "3.5.1", "2.3.0"])
def test_a_triton_older_than_the_kernel_knows_is_refused_by_its_version(installed_triton, version):
    installed_triton(version)
    reason = table_bias.unavailable(torch.device("cpu"))
    assert reason == f"triton {version}: it needs triton >= 3.6 (pip install -U triton)"


@pytest.mark.parametrize("version", ["3.6.0", "3.9.0", "3.10.0", "4.0.0"])
def test_a_triton_the_kernel_runs_on_passes(installed_triton, version):
    installed_triton(version)
    assert table_bias.unavailable(torch.device("cpu")) is None


def test_no_triton_is_refused_as_before(installed_triton):
    installed_triton(None)
    reason = table_bias.unavailable(torch.device("cpu"))
    assert reason == "anything without the triton package installed (pip install triton)"


def test_a_device_it_cannot_run_on_is_named_before_the_version(installed_triton, monkeypatch):
    installed_triton("3.5.1")
    monkeypatch.delenv("TRITON_INTERPRET")
    reason = table_bias.unavailable(torch.device("cpu"))
    assert reason.startswith("tensors on cpu: it runs on CUDA")


def test_the_version_is_read_once_a_process(installed_triton, monkeypatch):
    """`unavailable` runs at every kernel call: the package metadata (a read from disk) only
    at the first."""
    installed_triton("3.9.0")
    reads = []
    monkeypatch.setattr(importlib.metadata, "version", lambda name: reads.append(name) or "3.9.0")
    for _ in range(3):
        assert table_bias.unavailable(torch.device("cpu")) is None
    assert reads == ["triton"]
