"""The probe grid: one cell per (task, encoding, seed, positional rate), each stored
atomically as it finishes so that a killed run redoes none of them; then, for each (task,
encoding), the rate whose training loss ended lowest, and results.json, the tables and the
plots at it."""

from __future__ import annotations

import json
import multiprocessing
import statistics
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import torch
from omegaconf import OmegaConf
from rich.console import Console

from ...data.manifest import write_atomic
from ..runs.device import resolve_device
from ..runs.pool_errors import cancelled_on_error
from ..runs.pool_worker import start_pool_worker
from .cell import run_cell
from .paired import paired_results
from .settings import ProbeSettings
from .tasks import probe_task

CELLS = "cells"


def cell_path(run_dir: Path, task: str, encoding: str, seed: int, scale: float) -> Path:
    return run_dir / CELLS / f"{task}__{file_name(encoding)}__lr{scale:g}__seed{seed}.json"


def file_name(encoding: str) -> str:
    """An encoding's name in a file name: `tupe-a/tie-cls` as `tupe-a+tie-cls`."""
    return encoding.replace("/", "+")


def single_rate_path(run_dir: Path, task: str, encoding: str, seed: int) -> Path:
    """Where a cell was stored when a run had one positional rate: its fingerprint holds
    that rate, so it is reused for the same rate alone."""
    return run_dir / CELLS / f"{task}__{file_name(encoding)}__seed{seed}.json"


def stored_cell(path: Path, fingerprint: str) -> dict | None:
    """A finished cell of these settings, or None (missing, damaged or from other settings)."""
    if not path.is_file():
        return None
    try:
        cell = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    return cell if cell.get("fingerprint") == fingerprint else None


def compute_cell(
    task: str,
    encoding: str,
    seed: int,
    scale: float,
    settings: dict,
    path: str,
    device: str = "cpu",
) -> dict:
    """Train and evaluate one cell on `device` and store it atomically."""
    probe_settings = ProbeSettings(**settings)
    cell = run_cell(probe_task(task), encoding, seed, probe_settings, device, scale)
    cell["fingerprint"] = probe_settings.cell_fingerprint(encoding, scale)
    write_atomic(Path(path), json.dumps(cell, indent=1) + "\n")
    return cell


def finished_cell(run_dir: Path, key: tuple, fingerprint: str) -> dict | None:
    """The stored cell of `key` (task, encoding, seed, rate) for these settings, also from a
    run of that one rate (`single_rate_path`), or None."""
    cell = stored_cell(cell_path(run_dir, *key), fingerprint)
    cell = cell or stored_cell(single_rate_path(run_dir, *key[:3]), fingerprint)
    return cell and {**cell, "position_lr_scale": key[3]}


@contextmanager
def torch_threads(count: int):
    """Cells in this process use `count` threads (small models run fastest on one: more
    threads mostly wait on each other), then the caller's setting returns."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_cells(
    settings: ProbeSettings, run_dir: Path, console: Console, device: str = "cpu"
) -> list[dict]:
    """Every cell of the grid on `device`, computing only those not stored yet."""
    rates = {name: settings.rates_of(name) for name in settings.encodings}
    grid = [
        (task, encoding, seed, scale)
        for task in settings.tasks
        for encoding in settings.encodings
        for scale in rates[encoding]
        for seed in range(settings.seeds)
    ]
    fingerprints = {
        (name, scale): settings.cell_fingerprint(name, scale)
        for name in settings.encodings
        for scale in rates[name]
    }
    done = {key: finished_cell(run_dir, key, fingerprints[key[1], key[3]]) for key in grid}
    todo = [key for key in grid if done[key] is None]
    console.print(f"{len(grid) - len(todo)} of {len(grid)} cells already done, {len(todo)} to run")
    arguments = [(*key, asdict(settings), str(cell_path(run_dir, *key)), device) for key in todo]
    if settings.workers == 1 or len(todo) <= 1:
        with torch_threads(1):
            for key, args in zip(todo, arguments, strict=True):
                done[key] = compute_cell(*args)
                finished = len(grid) - sum(v is None for v in done.values())
                report_cell(console, done[key], finished)
    else:
        # spawn: fresh interpreters, no forked torch thread pools
        context = multiprocessing.get_context("spawn")
        with (
            ProcessPoolExecutor(
                settings.workers, mp_context=context, initializer=start_pool_worker
            ) as pool,
            cancelled_on_error(pool),
        ):
            futures = {
                pool.submit(compute_cell, *args): key
                for key, args in zip(todo, arguments, strict=True)
            }
            for future in as_completed(futures):
                done[futures[future]] = future.result()
                finished = len(grid) - sum(v is None for v in done.values())
                report_cell(console, done[futures[future]], finished)
    return [done[key] for key in grid]


def report_cell(console: Console, cell: dict, finished: int) -> None:
    rate = f"positional rate x{cell['position_lr_scale']:g}"
    where = f"{cell['task']} / {cell['encoding']} / {rate} / seed {cell['seed']}"
    if cell["status"] != "ok":
        console.print(f"[{finished}] {where}: unsupported")
        return
    lengths = cell["lengths"]
    first = lengths[min(lengths, key=int)]
    console.print(
        f"[{finished}] {where}: token accuracy {100 * first['token']:.1f}% at the training "
        f"length ({cell['seconds']:.1f} s)"
    )


def summarise(values: list[float]) -> dict:
    """Mean and sample standard deviation over seeds (0 for one seed)."""
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "by_seed": values,
    }


def mean_loss(runs: list[dict]) -> float:
    return statistics.fmean(c["final_train_loss"] for c in runs)


def at_chosen_rate(by_rate: dict[float, list[dict]]) -> float:
    """The positional rate whose final training loss, averaged over the seeds, is lowest (the
    first candidate on a tie). The loss is that of the last steps' examples, each drawn fresh:
    no example of it was trained on before, so the choice reads no test example."""
    return min(by_rate, key=lambda scale: mean_loss(by_rate[scale]))


def rate_summary(by_rate: dict[float, list[dict]], settings: ProbeSettings) -> dict:
    """Per candidate rate: the mean final training loss and token accuracy at the shortest
    test length (None past a position table)."""
    shortest = str(min(settings.test_lens))
    summary = {}
    for scale, runs in by_rate.items():
        at_length = [c["lengths"][shortest] for c in runs]
        token = (
            None if "status" in at_length[0] else statistics.fmean(m["token"] for m in at_length)
        )
        summary[f"{scale:g}"] = {"final_train_loss": mean_loss(runs), "token": token}
    return summary


def aggregate(cells: list[dict], settings: ProbeSettings) -> dict:
    """results[task][encoding] = {"status", "reason"?, "position_lr_scale" (the rate chosen,
    `at_chosen_rate`), "rates" (`rate_summary`), "lengths": {n: {"token", "exact"} as
    mean/std/by_seed at that rate, or {"status": ...}}}."""
    results: dict = {}
    for task in settings.tasks:
        results[task] = {}
        for encoding in settings.encodings:
            every = [c for c in cells if c["task"] == task and c["encoding"] == encoding]
            if any(c["status"] != "ok" for c in every):
                reason = next(c["reason"] for c in every if c["status"] != "ok")
                results[task][encoding] = {"status": "unsupported", "reason": reason}
                continue
            # the rates its cells trained at (`settings.rates_of`), in the candidates' order
            by_rate = {
                scale: runs
                for scale in settings.position_lr_scales
                if (runs := [c for c in every if c["position_lr_scale"] == scale])
            }
            chosen = at_chosen_rate(by_rate)
            runs = by_rate[chosen]
            lengths = {}
            for length in map(str, settings.test_lens):
                at_length = [c["lengths"][length] for c in runs]
                if "status" in at_length[0]:
                    lengths[length] = {"status": at_length[0]["status"]}
                else:
                    lengths[length] = {
                        metric: summarise([m[metric] for m in at_length])
                        for metric in ("token", "exact")
                    }
            results[task][encoding] = {
                "status": "ok",
                "model": probe_task(task).model,
                "position_lr_scale": chosen,
                "rates": rate_summary(by_rate, settings),
                "final_train_loss": summarise([c["final_train_loss"] for c in runs]),
                "lengths": lengths,
            }
    return results


def run_probe(
    settings: ProbeSettings,
    run_dir: Path,
    console: Console | None = None,
    device: str | None = "cpu",
) -> dict:
    """Run (or finish) the grid in `run_dir` and write config.yaml, results.json, results.md
    and one plot per task. Returns results.json's content. device: where cells train (see
    lab/runs/device.py; "auto" picks a GPU when there is one)."""
    device = str(resolve_device(device))
    from .plots import plot_task
    from .report import results_markdown

    console = console or Console()
    run_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(run_dir / "config.yaml", OmegaConf.to_yaml(OmegaConf.structured(settings)))
    start = time.perf_counter()
    cells = run_cells(settings, run_dir, console, device)
    results = aggregate(cells, settings)
    paired = paired_results(results, settings)
    output = {
        "settings": asdict(settings),
        "results": results,
        "paired": paired,
        "cell_seconds": sum(c.get("seconds", 0.0) for c in cells),
        "cell_cpu_seconds": sum(c.get("cpu_seconds", 0.0) for c in cells),
        "wall_seconds": time.perf_counter() - start,
    }
    write_atomic(run_dir / "results.json", json.dumps(output, indent=1) + "\n")
    write_atomic(run_dir / "results.md", results_markdown(results, settings, paired))
    for task in settings.tasks:
        plot_task(results[task], task, settings, run_dir / f"accuracy-{task}.png")
    console.print(f"results in {run_dir}")
    return output
