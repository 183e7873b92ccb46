"""`posattn compare --task translation`: DIET Table 4 in our numbers. One encoder-decoder per
encoding and seed on the same pairs and budget, each scored with beam search (BLEU, chrF) on
the test pairs; the report has the pretraining comparison's shape (lab/report.py)."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from ...errors import require
from ..runs.config import to_yaml
from ..runs.context import run_context
from ..runs.trainer import checkpoints
from .report import translation_markdown
from .runconfig import TranslationRunConfig
from .train import load_tokenizer, seq2seq_config, train_translation

console = Console()


def run_once(config: TranslationRunConfig, run_dir: Path) -> dict:
    """Train and evaluate one (encoding, seed); a finished run is read back, a killed one
    resumes from its last checkpoint."""
    if (run_dir / "metrics.json").is_file():
        return json.loads((run_dir / "metrics.json").read_text())
    resume = bool(checkpoints(run_dir / "checkpoints"))
    return train_translation(config, run_dir, resume=resume)


def check_before_training(config: TranslationRunConfig) -> None:
    """Every encoding builds for this model (encoder and causal decoder) before any step, and
    the runs will be scored on the test pairs."""
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


def compare_translation(config: TranslationRunConfig, output: Path, preset: str) -> dict:
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    check_before_training(config)
    (output / "config.yaml").write_text(to_yaml(config))
    start = time.perf_counter()
    results: dict[str, dict[int, dict]] = {}
    runs = [(e, s) for e in config.encodings for s in config.seeds]
    for index, (encoding, seed) in enumerate(runs, start=1):
        console.rule(f"[{index}/{len(runs)}] {encoding}, seed {seed}")
        run_config = with_encoding(config, encoding)
        run_config = replace(run_config, train=replace(run_config.train, seed=seed))
        results.setdefault(encoding, {})[seed] = run_once(
            run_config, output / encoding / f"seed{seed}"
        )
    context = run_context(
        preset,
        time.perf_counter() - start,
        pairs=config.data.pairs,
        beam_size=config.decode.beam_size,
        length_penalty=config.decode.length_penalty,
    )
    (output / "results.json").write_text(
        json.dumps({"context": context, "results": results}, indent=2)
    )
    markdown = translation_markdown(results, context)
    (output / "results.md").write_text(markdown)
    print(markdown)
    return results
