"""lab/runs/worker_exit.py: a comparison's or a probe grid's pool workers exit when the
command that spawned them is killed, so that no orphan goes on writing cells that the next
command in the same run directory takes over (its lock names the command's pid only)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from posattn.directory_lock import process_alive

PARENT = """
import multiprocessing, os, sys, time
from concurrent.futures import ProcessPoolExecutor

from {module} import {initializer}


def work(path):
    with open(path + ".tmp", "w") as file:
        file.write(str(os.getpid()))
    os.replace(path + ".tmp", path)
    time.sleep(120)


if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context, initializer={initializer}) as pool:
        pool.submit(work, sys.argv[1]).result()
"""


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.mark.parametrize(
    ("module", "initializer"),
    [
        ("posattn.lab.pretraining.compare", "one_thread_worker"),
        ("posattn.lab.runs.pool_worker", "start_pool_worker"),  # the probe grid's
    ],
)
def test_a_pool_worker_exits_when_its_command_is_killed(tmp_path, module, initializer):
    script = tmp_path / "command.py"
    script.write_text(textwrap.dedent(PARENT.format(module=module, initializer=initializer)))
    started = tmp_path / "worker.pid"
    command = subprocess.Popen([sys.executable, str(script), str(started)], cwd=tmp_path)
    worker = None
    try:
        assert wait_for(started.exists, 120), "the worker never started its cell"
        worker = int(started.read_text())
        assert process_alive(worker)
        command.send_signal(signal.SIGTERM)  # the default action: exit at once, no cleanup
        assert command.wait(30) == -signal.SIGTERM
        assert wait_for(lambda: not process_alive(worker), 30), "the worker outlived its command"
    finally:
        command.kill()
        if worker is not None and process_alive(worker):
            os.kill(worker, signal.SIGKILL)
