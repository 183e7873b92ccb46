"""scripts/offline-gpu.sh check's time budget, with a stand-in python and nvidia-smi: the
benchmarks keep their bounds after the tests and the tile sweep, and a stage with too little
time left is skipped instead of being cut short mid-way."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The stand-in python records each stage's arguments (not the versions' query or pip's);
# the kernel tests take TEST_SLEEP seconds, every other stage none. The stand-in timeout
# records each stage's bound.
STAND_IN_PYTHON = """#!/bin/bash
case "$*" in -c*sys.exit*) exit "${OLD_TRITON:-0}" ;; -c* | *"pip install"*) exit 0 ;; esac
echo "$*" >>"$CALLS"
case "$*" in *pytest*-k\\ triton*) sleep "$TEST_SLEEP" && exit "${TEST_EXIT:-0}" ;; esac
case "$*" in *"--kernels flex"*) exit "${FLEX_EXIT:-0}" ;; esac
exit 0
"""
STAND_IN_TIMEOUT = """#!/bin/bash
echo "$1" >>"$CALLS.bounds"
shift
exec "$@"
"""


def stages_run(tmp_path: Path, returncode: int = 0, **bounds: int) -> list[tuple[str, int]]:
    """(the stage's python arguments, its bound in seconds) for each stage that ran."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_ins = (("python", STAND_IN_PYTHON), ("timeout", STAND_IN_TIMEOUT),
                 ("nvidia-smi", "#!/bin/sh\necho gpu\n"))  # fmt: skip
    for name, text in stand_ins:
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    calls = tmp_path / "calls"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHON=str(bin_dir / "python"),
               RUNS=str(tmp_path / "runs"), CALLS=str(calls), SITE=str(tmp_path / "site"),
               **{key: str(value) for key, value in bounds.items()})  # fmt: skip
    result = subprocess.run(
        ["bash", "scripts/offline-gpu.sh", "check", str(tmp_path / "out")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == returncode, result.stderr
    assert (tmp_path / "out" / "check.tar.gz").is_file()
    stages = calls.read_text().splitlines()
    bounds = [int(line) for line in Path(f"{calls}.bounds").read_text().split()]
    return list(zip(stages, bounds, strict=True))


def kinds(calls: list[tuple[str, int]]) -> list[str]:
    names = {"bench-l2": "l2", "bench-fused": "fused", "bench-folded": "factors",
             "--attention-dropout": "dropout",
             "fold=true": "fold",
             "-k triton": "tests",
             "triton_tiles": "tiles",
             "--model-lengths 512": "model",
             "--kernels sdpa,triton": "bench", "--host": "host", "triton_profile": "profile",
             "takes_flex": "untie", "--kernels flex": "flex"}  # fmt: skip
    return [next(kind for key, kind in names.items() if key in call) for call, _ in calls]


def test_every_stage_runs_in_order_when_time_allows(tmp_path):
    calls = stages_run(tmp_path, CHECK_SECONDS=500, TEST_SLEEP=0)
    assert kinds(calls) == [
        "tests", "untie", "bench", "l2", "model", "dropout", "fused", "factors", "profile",
        "profile", "host", "tiles", "fold", "flex",
    ]  # fmt: skip


def test_the_reported_tests_include_per_sample_gradients_on_the_gpu(tmp_path):
    """torch.func's GPU test (vmap of grad through SDPA with `auto`'s thresholds at 0) runs
    with the reported tests, selected by its node and by the filter."""
    calls = stages_run(tmp_path, CHECK_SECONDS=500, TEST_SLEEP=0)
    (reported,) = [call for call, _ in calls if "takes_flex" in call]
    assert "tests/test_func_transforms.py::test_per_sample_gradients_on_a_gpu" in reported
    assert "or on_a_gpu" in reported


def test_the_l2_stage_is_skipped_where_triton_reads_the_table_through_l2_either_way(tmp_path):
    """Triton before 3.9 compiles the table's copies through L2 whatever the load asks: the
    stage that times POSATTN_TRITON_TABLE_CACHE=l2 against the default would time one kernel
    twice, and is left out, saying why."""
    calls = stages_run(tmp_path, CHECK_SECONDS=500, TEST_SLEEP=0, OLD_TRITON=1)
    assert "l2" not in kinds(calls) and kinds(calls)[2:4] == ["bench", "model"]


def test_the_reported_tests_are_skipped_to_leave_the_benchmarks_their_bounds(tmp_path):
    # 33 s in all, the benchmarks bound to 10, 1 and 1 s: after 3 s of tests the reported
    # ones would have 33 - 3 - 12 = 18 s, under the 20 a stage needs; the benchmarks and what
    # follows run.
    calls = stages_run(tmp_path, CHECK_SECONDS=33, TEST_SLEEP=3, BENCH_SECONDS=10, L2_SECONDS=1,
                       MODEL_SECONDS=1)  # fmt: skip
    assert kinds(calls) == [
        "tests", "bench", "l2", "model", "dropout", "fused", "factors", "profile", "profile",
        "host", "tiles", "fold", "flex",
    ]  # fmt: skip
    bounds = dict(zip(kinds(calls), (bound for _, bound in calls), strict=False))
    # The tests' own 150 s would eat into the benchmarks' 12: they get 33 - 12 = 21 s (20
    # where the clock's second ticks over between the start and the stage).
    assert bounds["tests"] in (20, 21)
    assert (bounds["bench"], bounds["l2"], bounds["model"]) == (10, 1, 1)


def recorded_python_calls(tmp_path: Path, *arguments: str, **variables: str) -> list[str]:
    """scripts/offline-gpu.sh ARGUMENTS with a python that records its arguments and does
    nothing: the calls it made."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text('#!/bin/bash\necho "$*" >>"$CALLS"\n')
    (bin_dir / "python").chmod(0o755)
    calls = tmp_path / "calls"
    env = dict(os.environ, PYTHON=str(bin_dir / "python"), CALLS=str(calls), **variables)
    result = subprocess.run(
        ["bash", "scripts/offline-gpu.sh", *arguments], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return calls.read_text().splitlines()


def test_wheels_builds_what_check_needs_without_the_data(tmp_path):
    """`wheels`: the pure-Python wheels `check` installs, without `posattn data pack` (which
    needs prepared data)."""
    (call,) = recorded_python_calls(tmp_path, "wheels", BUNDLE=str(tmp_path / "offline"))
    assert call.startswith(f"-m pip wheel -q --no-deps -w {tmp_path / 'offline'}/wheels ")
    assert "omegaconf==2.3.0" in call and "data pack" not in call


def test_a_failed_gate_stops_the_check_and_says_how_it_ended(tmp_path):
    """A gate cut off by its bound (timeout's 124: a fresh H200 ran its 18 tests in 134 s,
    past 150 with pytest's start) ends the check, its log saying so."""
    calls = stages_run(tmp_path, returncode=1, CHECK_SECONDS=600, TEST_SLEEP=0, TEST_EXIT=124)
    assert kinds(calls) == ["tests"]
    log = (tmp_path / "runs" / "check" / "gpu-tests.log").read_text()
    assert "gate: pytest exited 124 (124: cut off at 150s)" in log


def test_a_stage_that_fails_says_so_in_its_log(tmp_path):
    """A benchmark stage that dies (the H200's flex stage left an empty log after 13 s) gets
    its exit status written into its log, and the check goes on to its end."""
    stages_run(tmp_path, CHECK_SECONDS=500, TEST_SLEEP=0, FLEX_EXIT=139)
    log = (tmp_path / "runs" / "check" / "bench-flex.log").read_text()
    assert log == "(exit status 139: 124 when cut off at its bound)\n"


def test_tiles_runs_the_sweep_alone_into_its_folder(tmp_path):
    """`tiles OUT`: the wheels installed as `check` installs them, then the sweep into OUT."""
    out = tmp_path / "out"
    installed, swept = recorded_python_calls(tmp_path, "tiles", str(out),
                                             SITE=str(tmp_path / "site"))  # fmt: skip
    assert "pip install" in installed and swept == f"scripts/triton_tiles.py {out}"
    assert (out / "tiles.log").is_file()
