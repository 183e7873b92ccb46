"""posattn's commands keep freed CPU memory for reuse (glibc's mallopt) unless
--release-memory, in their own process and in the worker processes they spawn, and the bench
records which."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import pytest

from posattn.cli import main
from posattn.lab.pretraining.compare import one_thread_worker
from posattn.lab.runs import freed_memory

pytestmark = pytest.mark.skipif(
    freed_memory.glibc_mallopt() is None, reason="glibc's mallopt is not this C library's"
)


@pytest.fixture
def told(monkeypatch):
    """Every mallopt call, made for real, from glibc's thresholds released (the process is
    left as a command leaves it)."""
    calls = []
    real = freed_memory.glibc_mallopt()

    def recording(parameter, value):
        calls.append((parameter, value))
        return real(parameter, value)

    monkeypatch.setattr(freed_memory, "glibc_mallopt", lambda: recording)
    freed_memory.choose_freed_memory(release=True)  # a command earlier in this process kept it
    monkeypatch.delenv(freed_memory.RELEASE_FREED_MEMORY, raising=False)
    calls.clear()
    yield calls
    freed_memory.choose_freed_memory(release=False)  # as every command leaves a process


def worker_keeps_freed_memory() -> bool:
    return freed_memory.kept_here


@pytest.mark.parametrize("release", [False, True])
def test_a_command_sets_freed_memory_for_itself_and_its_spawned_workers(release, told, capsys):
    main(["--release-memory", "list"] if release else ["list"])
    assert freed_memory.kept_here == (not release)
    if not release:
        assert (freed_memory.M_MMAP_THRESHOLD, 1 << 30) in told
        assert (freed_memory.M_TRIM_THRESHOLD, (1 << 31) - 1) in told  # C's int
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context, initializer=one_thread_worker) as pool:
        assert pool.submit(worker_keeps_freed_memory).result() == (not release)


def test_releasing_after_keeping_restores_glibcs_starting_thresholds(told):
    freed_memory.choose_freed_memory(release=False)
    told.clear()
    freed_memory.choose_freed_memory(release=True)
    assert not freed_memory.kept_here
    assert told == [(freed_memory.M_MMAP_THRESHOLD, 128 * 1024),
                    (freed_memory.M_TRIM_THRESHOLD, 128 * 1024)]  # fmt: skip
    told.clear()
    freed_memory.choose_freed_memory(release=True)  # already released: nothing to tell
    assert told == []
