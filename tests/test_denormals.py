"""posattn's commands flush float32 subnormals to zero on the CPU unless --keep-denormals,
in their own process and in the worker processes they spawn."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import pytest
import torch

from posattn.cli import main
from posattn.lab.pretraining.compare import one_thread_worker

SUBNORMAL = 1e-39  # below float32's smallest normal, 1.18e-38


def subnormal_survives() -> bool:
    """Whether a float32 subnormal times one stays nonzero in this process now."""
    return bool((torch.tensor([SUBNORMAL], dtype=torch.float32) * 1.0).item() != 0.0)


def worker_keeps_subnormals() -> bool:
    return subnormal_survives()


@pytest.mark.parametrize("keep", [False, True])
def test_a_command_sets_subnormals_for_itself_and_its_spawned_workers(keep, capsys):
    # Asked here, not at import: the spawned worker imports this module too.
    if not torch.set_flush_denormal(False):
        pytest.skip("no flush-to-zero on this CPU")
    assert subnormal_survives()
    main(["--keep-denormals", "list"] if keep else ["list"])
    assert subnormal_survives() == keep
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context, initializer=one_thread_worker) as pool:
        assert pool.submit(worker_keeps_subnormals).result() == keep
