"""`posattn translate rescore`: decode finished runs again with a length penalty chosen on the
dev pairs, so that a comparison does not rank how long each model's beam outputs come out.

Beam search with GNMT's length normalisation (DIET's alpha 0.6) can return outputs far shorter
than the references for an under-trained model, and by a different amount per model, so BLEU's
brevity penalty can decide a comparison. Tuning alpha on the dev split (never on test) is the
usual remedy. Each rescored run is written as a run `translate combine` reads: the original
metrics with the test evaluation replaced, and its stage settings with the chosen
`decode.length_penalty`, which combine then lists as a setting in which arms differ.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from ...data.manifest import write_atomic
from ...data.translation_tokenizer import load_translation_tokenizer
from ...errors import invalid, require
from ..runs.device import resolve_device
from ..runs.stages import STAGE_FILE
from .combine import RESULT, read_run, seed_directories
from .runconfig import TranslationRunConfig, load_translation_config
from .train import evaluate_split

TUNING = "length_penalty_tuning"


def parse_penalties(text: str) -> list[float]:
    """'0.6,1.0,1.5' -> [0.6, 1.0, 1.5]: at least one value, each >= 0, none repeated."""
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError as error:
        allowed = "comma-separated numbers, e.g. 0.6,1.0,1.5"
        raise invalid("--length-penalties", text, allowed) from error
    require(
        bool(values) and min(values) >= 0 and len(set(values)) == len(values),
        "--length-penalties",
        text,
        "at least one value, each >= 0, none repeated",
    )
    return values


def run_config(run: Path, data_dir: str | None) -> TranslationRunConfig:
    """The run's own settings (its config.yaml), its data read from data_dir where given."""
    config = load_translation_config(None, run / "config.yaml")
    if data_dir:
        config = replace(config, data=replace(config.data, data_dir=data_dir))
    return config


def with_penalty(config: TranslationRunConfig, alpha: float) -> TranslationRunConfig:
    return replace(config, decode=replace(config.decode, length_penalty=alpha))


def tune(model, tokenizer, config: TranslationRunConfig, penalties: list[float]) -> dict:
    """Beam scores on the dev split at each penalty and the one with the highest dev BLEU
    (the first listed among equals)."""
    candidates = {}
    for alpha in penalties:
        beam = evaluate_split(model, tokenizer, with_penalty(config, alpha), "dev")["beam"]
        candidates[str(alpha)] = {
            key: beam[key] for key in ("bleu", "chrf", "brevity_penalty") if key in beam
        }
    best = max(penalties, key=lambda alpha: candidates[str(alpha)]["bleu"])
    return {"split": "dev", "candidates": candidates, "chosen": best}


def reusable(target: Path, source: Path, penalties: list[float]) -> dict | None:
    """The tuning of a rescored run of the same source and candidates (reused, not decoded
    again), or None."""
    if not (target / RESULT).is_file():
        return None
    tuning = json.loads((target / RESULT).read_text(encoding="utf-8")).get(TUNING, {})
    same = tuning.get("source") == str(source.resolve()) and tuning.get("penalties") == penalties
    return tuning if same else None


def rescore_run(
    run: Path,
    run_record: tuple[dict, dict],
    target: Path,
    penalties: list[float],
    data_dir: str | None = None,
    device: str | None = None,
) -> dict:
    """Decode one run (its metrics and settings already read) and write it to `target`."""
    from ...models.seq2seq import PosAttnForSeq2SeqLM

    metrics, settings = run_record
    config = run_config(run, data_dir)
    model = PosAttnForSeq2SeqLM.from_pretrained(run / "model").to(resolve_device(device)).eval()
    tokenizer = load_translation_tokenizer(run / "model")
    tuning = tune(model, tokenizer, config, penalties)
    test = evaluate_split(model, tokenizer, with_penalty(config, tuning["chosen"]), "test")
    tuning.update(source=str(run.resolve()), penalties=penalties)
    rescored = {**metrics, "evaluation": {**metrics["evaluation"], "test": test}, TUNING: tuning}
    settings = {**settings, "decode": {**settings["decode"], "length_penalty": tuning["chosen"]}}
    stage = {"settings": settings, "rescored_from": str(run.resolve())}
    write_atomic(target / STAGE_FILE, json.dumps(stage, indent=2) + "\n")
    write_atomic(target / RESULT, json.dumps(rescored, indent=2))  # last: marks it finished
    return tuning


def rescore_runs(
    directory: Path,
    output: Path,
    penalties: list[float],
    data_dir: str | None = None,
    device: str | None = None,
    seeds: list[int] | None = None,
) -> dict:
    """Rescore every finished run under `directory` (a compare output of one encoding, or its
    encoding's folder; of `seeds` only, where given) into output/<encoding>/seed<S>/; returns
    {seed: tuning}."""
    runs = seed_directories(Path(directory))
    output = Path(output)
    require(
        output.resolve() != Path(directory).resolve(),
        "--output",
        str(output),
        "a directory other than the runs' own (their results are kept)",
    )
    found = {}
    for run in runs:
        record = read_run(run)
        metrics = record[0]
        if seeds is not None and metrics["seed"] not in seeds:
            continue
        target = output / metrics["encoding"] / run.name
        tuning = reusable(target, run, penalties)
        if tuning is None:
            tuning = rescore_run(run, record, target, penalties, data_dir, device)
        found[metrics["seed"]] = tuning
    return found
