"""A run directory is written by one command at a time: its lock names the holder, a dead
holder's lock is taken over, and the lock goes away when the command ends."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from posattn import PosAttnConfigError
from posattn.cli import entry, main
from posattn.directory_lock import DirectoryLock
from posattn.lab.runs.lock import LOCK_FILE, RunLock, lock_path, run_lock


@pytest.fixture
def data_dir(tiny_data_dir):
    return tiny_data_dir


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_second_acquire_is_refused_naming_the_holder(tmp_path):
    with RunLock(tmp_path / "run", "posattn pretrain"):
        holder = json.loads(lock_path(tmp_path / "run").read_text())
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
        assert holder["command"] == "posattn pretrain" and holder["since"] <= time.time()
        since = time.strftime("%Y-%m-%d %H:%M", time.localtime(holder["since"]))
        with pytest.raises(PosAttnConfigError) as refused:
            RunLock(tmp_path / "run", "posattn compare").acquire()
        message = str(refused.value)
        assert f"pid {os.getpid()}" in message and "'posattn pretrain'" in message
        assert f"since {since}" in message and str(tmp_path / "run") in message
    assert not lock_path(tmp_path / "run").exists()


def test_release_removes_the_lock_also_after_an_exception(tmp_path):
    with pytest.raises(RuntimeError), run_lock(tmp_path, "posattn probe"):
        assert (tmp_path / LOCK_FILE).is_file()
        raise RuntimeError("the run failed")
    assert not (tmp_path / LOCK_FILE).exists()
    with run_lock(tmp_path, "posattn probe"):  # free again
        pass


def test_a_stale_lock_is_taken_over_with_a_warning(tmp_path):
    stale = {"pid": dead_pid(), "host": socket.gethostname(), "command": "posattn pretrain",
             "since": time.time() - 60, "token": "old"}  # fmt: skip
    lock_path(tmp_path).write_text(json.dumps(stale))
    with pytest.warns(UserWarning, match=rf"stale lock.*pid {stale['pid']}.*no longer running"):
        lock = RunLock(tmp_path, "posattn pretrain").acquire()
    assert json.loads(lock_path(tmp_path).read_text())["pid"] == os.getpid()
    lock.release()
    assert not lock_path(tmp_path).exists()


def test_a_lock_from_another_host_is_never_taken_over(tmp_path):
    other = {"pid": dead_pid(), "host": "elsewhere.invalid", "command": "posattn probe",
             "since": time.time()}  # fmt: skip
    lock_path(tmp_path).write_text(json.dumps(other))
    with pytest.raises(PosAttnConfigError, match=r"on elsewhere\.invalid"):
        RunLock(tmp_path, "posattn probe").acquire()


def test_wait_takes_the_lock_once_its_holder_lets_go_and_says_whom_it_waited_for(tmp_path):
    holder = RunLock(tmp_path, "posattn data prepare").acquire()
    notices = []

    def notice(text: str) -> None:
        notices.append(text)
        if len(notices) == 1:
            holder.release()  # the holder finishes while the second one waits

    lock = DirectoryLock(tmp_path, "posattn data prepare").wait(notice, poll_seconds=0.01)
    assert len(notices) == 1 and f"waiting for pid {os.getpid()}" in notices[0]
    assert str(lock_path(tmp_path)) in notices[0]
    assert json.loads(lock_path(tmp_path).read_text())["token"] == lock.token
    with lock:  # held already: entering does not take it twice
        pass
    assert not lock_path(tmp_path).exists()


def test_wait_takes_a_free_lock_without_a_notice(tmp_path):
    lock = DirectoryLock(tmp_path / "new", "posattn data prepare").wait(pytest.fail)
    assert lock_path(tmp_path / "new").exists()
    lock.release()


def test_release_leaves_a_lock_that_is_no_longer_ours(tmp_path):
    lock = RunLock(tmp_path, "posattn pretrain").acquire()
    lock_path(tmp_path).write_text(json.dumps({"pid": 1, "token": "someone else"}))
    lock.release()
    assert lock_path(tmp_path).exists()


def test_release_removes_the_folders_the_lock_made_while_they_are_empty(tmp_path):
    """A command refused after taking its lock (a missing data directory, say) leaves no
    empty run directory behind; a folder that holds anything, or was there before, stays."""
    nested = tmp_path / "runs" / "compare" / "run"
    RunLock(nested, "posattn compare").acquire().release()
    assert list(tmp_path.iterdir()) == []
    lock = RunLock(nested, "posattn compare").acquire()
    (nested / "stage.json").write_text("{}")
    lock.release()
    assert [p.name for p in nested.iterdir()] == ["stage.json"]
    (nested / "stage.json").unlink()
    RunLock(nested, "posattn compare").acquire().release()  # there before: stays
    assert nested.is_dir()


def test_a_refused_command_leaves_no_empty_output_folder(tmp_path):
    output = tmp_path / "runs" / "translate"
    with pytest.raises(PosAttnConfigError, match=r"tokenizer=.*not allowed"):
        main(["translate", "train", "--preset", "smoke", "--data-dir", str(tmp_path / "none"),
              "--output", str(output)])  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_only_rank_0_takes_the_lock_under_torchrun(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    with run_lock(tmp_path, "posattn pretrain") as lock:
        assert lock is None and not lock_path(tmp_path).exists()
    monkeypatch.setenv("RANK", "0")
    with run_lock(tmp_path, "posattn pretrain") as lock:
        assert lock is not None and lock_path(tmp_path).exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["pretrain", "--preset", "smoke"],
        ["compare", "--preset", "smoke"],
        ["compare", "--task", "translation", "--preset", "smoke"],
        ["translate", "train", "--preset", "smoke"],
        ["probe", "--preset", "smoke"],
        ["inspect", "missing-model"],
        ["finetune", "MODEL", "--preset", "smoke"],
    ],
)
def test_commands_refuse_a_locked_run_directory(argv, data_dir, tmp_path, capsys):
    output, model = tmp_path / "run", tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")  # finetune checks its model before the lock
    argv = [str(model) if arg == "MODEL" else arg for arg in argv] + ["--output", str(output)]
    if argv[0] != "probe":
        argv += ["--data-dir", str(data_dir)]
    with RunLock(output, "posattn pretrain"):
        with pytest.raises(PosAttnConfigError, match=rf"locked by pid {os.getpid()}"):
            main(argv)
        assert entry(argv) == 2
        assert "is locked by pid" in capsys.readouterr().err
        assert sorted(p.name for p in output.iterdir()) == [LOCK_FILE]  # nothing written
