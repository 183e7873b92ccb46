"""`posattn compare --task translation`: DIET Table 4 in our numbers. One encoder-decoder per
encoding and seed on the same pairs and budget, each scored with beam search (BLEU, chrF) on
the test pairs; the report has the pretraining comparison's shape (lab/report.py)."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from ...data.identity import translation_folders
from ...data.manifest import write_atomic
from ...errors import require
from ..runs.config import to_yaml
from ..runs.context import run_context
from ..runs.options import require_distinct_names
from ..runs.stages import FINISHED, RESUME, is_main_process, reuse_counts, stage_state
from .report import significance
from .report_files import write_report
from .runconfig import TranslationRunConfig
from .train import load_tokenizer, seq2seq_config, train_translation, translation_stage

console = Console()
TUNED_DIRECTORY = "length-tuned"


def run_once(config: TranslationRunConfig, run_dir: Path, overwrite: bool = False) -> dict:
    """Train and evaluate one (encoding, seed); a run finished with the same settings is read
    back, a killed one resumes from its last checkpoint (lab/runs/stages.py); one of other
    settings is refused, or with overwrite deleted and recomputed."""
    state = stage_state(translation_stage(config, run_dir), overwrite)
    if state == FINISHED:
        return json.loads((run_dir / "metrics.json").read_text())
    return train_translation(config, run_dir, resume=state == RESUME)


def check_before_training(config: TranslationRunConfig) -> None:
    """Every encoding builds for this model (encoder and causal decoder) before any step, and
    the runs will be scored on the test pairs."""
    require_distinct_names("encodings", config.encodings)
    require(
        "test" in config.decode.splits,
        "decode.splits",
        list(config.decode.splits),
        "a list that holds 'test': the comparison reports test scores",
    )
    tokenizer = load_tokenizer(config)
    for encoding in config.encodings:
        seq2seq_config(with_encoding(config, encoding), tokenizer)


def with_encoding(config: TranslationRunConfig, encoding: str) -> TranslationRunConfig:
    return replace(config, model=replace(config.model, encoding=encoding))


def run_configs(config: TranslationRunConfig, output: Path):
    """(encoding, seed, its config, its run directory) of every run of the comparison."""
    for encoding in config.encodings:
        for seed in config.seeds:
            run_config = with_encoding(config, encoding)
            run_config = replace(run_config, train=replace(run_config.train, seed=seed))
            yield encoding, seed, run_config, output / encoding / f"seed{seed}"


def compare_translation(
    config: TranslationRunConfig, output: Path, preset: str, overwrite: bool = False
) -> dict:
    """Every (encoding, seed) run in output/<encoding>/seed<seed>, then the report.
    overwrite: discard runs written with other settings instead of refusing them."""
    output = Path(output)
    check_before_training(config)
    runs = list(run_configs(config, output))
    states = [  # refused (or discarded) before anything trains
        stage_state(translation_stage(run_config, run_dir), overwrite)
        for _, _, run_config, run_dir in runs
    ]
    output.mkdir(parents=True, exist_ok=True)
    if is_main_process():  # under a launcher every rank trains each run; one writes
        write_atomic(output / "config.yaml", to_yaml(config))
    start = time.perf_counter()
    results: dict[str, dict[int, dict]] = {}
    for index, (encoding, seed, run_config, run_dir) in enumerate(runs, start=1):
        console.rule(f"[{index}/{len(runs)}] {encoding}, seed {seed}")
        results.setdefault(encoding, {})[seed] = run_once(run_config, run_dir, overwrite)
    context = run_context(
        preset,
        time.perf_counter() - start,
        pairs=config.data.pairs + (" reversed" if config.data.reverse else ""),
        beam_size=config.decode.beam_size,
        length_penalty=config.decode.length_penalty,
        cells=reuse_counts(states),
        data=translation_folders(config.data.data_dir, config.data.pairs).digests(),
    )
    tests = significance(results) if len(results) > 1 else {}
    # The main report first: decoding every run again takes minutes, and a stopped or failed
    # tuning must not leave finished runs without their report.
    write_report(output, results, context, tests)
    if config.tune_length_penalties:
        tuned = {"length_tuned": tune_lengths(config, output)}
        write_report(output, results, context, tests, tuned)
    return results


def tune_lengths(config: TranslationRunConfig, output: Path) -> dict:
    """Every finished run decoded again at the length penalty its dev pairs choose among
    `tune_length_penalties` (`translate rescore`), combined in OUTPUT/length-tuned as
    `translate combine` would; returns {directory, penalties, chosen: {encoding: {seed:
    penalty}}, seconds}."""
    from .combine import combine_runs
    from .rescore import rescore_runs

    start = time.perf_counter()
    tuned = output / TUNED_DIRECTORY
    penalties = list(config.tune_length_penalties)
    data_dir = config.data.data_dir
    chosen = {}
    for encoding in config.encodings:
        console.rule(f"length penalty tuned on dev: {encoding}")
        tunings = rescore_runs(
            output / encoding, tuned, penalties, data_dir=data_dir, seeds=list(config.seeds)
        )
        chosen[encoding] = {seed: tuning["chosen"] for seed, tuning in sorted(tunings.items())}
    combine_runs([f"{encoding}={tuned / encoding}" for encoding in config.encodings], tuned)
    seconds = time.perf_counter() - start  # decoding only: reused rescored runs take ~0
    return dict(directory=TUNED_DIRECTORY, penalties=penalties, chosen=chosen, seconds=seconds)
