"""`posattn translate train | eval`, and the translation side of `posattn compare`."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from ...option_lists import names_of
from ..runs.device import add_device_option
from ..runs.lock import run_lock
from ..runs.options import (
    add_overwrite_option,
    add_run_options,
    finish_distributed,
    model_directory,
)
from ..runs.trainer_section import check_machine
from .runconfig import TranslationRunConfig, load_translation_config


def add_options(parser: argparse.ArgumentParser) -> None:
    add_run_options(
        parser,
        "quick",
        presets="smoke | quick | cpu | curve | table4",
        example="train.steps=500 model.encoding=diet-rel decode.beam_size=4",
    )


def run_config(args: argparse.Namespace) -> TranslationRunConfig:
    config = load_translation_config(args.preset, args.config, args.overrides)
    if args.data_dir:
        config = replace(config, data=replace(config.data, data_dir=args.data_dir))
    check_machine(config.trainer, kernel=config.model.kernel)  # before a run directory is written
    return config


def run_train(args: argparse.Namespace) -> int:
    from ..runs.standalone import reused, standalone_state
    from .train import train_translation, translation_stage

    config = run_config(args)
    output = Path(args.output or f"runs/translate-{config.data.pairs}-{config.model.encoding}")
    with run_lock(output, "posattn translate train"):
        stage = translation_stage(config, output)
        if reused(stage, standalone_state(stage, args.overwrite, args.resume)):
            metrics = json.loads((output / stage.marker).read_text())
        else:
            metrics = train_translation(config, output, resume=args.resume)
    for split, scores in metrics.get("evaluation", {}).items():
        print(f"{split}: " + summary(scores))
    finish_distributed()
    return 0


def summary(scores: dict) -> str:
    parts = [
        f"{name} BLEU {scores[name]['bleu']:.2f} chrF {scores[name]['chrf']:.2f}"
        for name in ("greedy", "beam", "copy_source")
        if name in scores
    ]
    truncated = scores.get("truncated_sources", 0)
    note = f" ({truncated} of {scores['pairs']} sources truncated to max_len)" if truncated else ""
    if dropped := scores.get("pairs_dropped_too_long", 0):
        note += f" ({dropped} pairs over max_len left out, data.too_long=drop)"
    return ", ".join(parts) + note


def run_eval(args: argparse.Namespace) -> int:
    from ...data.parallel_files import read_parallel
    from ...data.translation_tokenizer import load_translation_tokenizer
    from ...models.seq2seq import PosAttnForSeq2SeqLM
    from ..runs.device import resolve_device
    from .evaluate import evaluate_model
    from .train import load_pairs, scored_pairs

    config = run_config(args)
    directory = model_directory("--model", args.model, PosAttnForSeq2SeqLM.config_class.model_type)
    model = PosAttnForSeq2SeqLM.from_pretrained(directory).to(resolve_device(args.device))
    tokenizer = load_translation_tokenizer(directory)
    truncate = args.truncate or config.data.too_long == "truncate"
    dropped = 0
    if args.source or args.target:
        # your own lines are translated line for line: never dropped
        pairs = read_parallel(Path(args.source or ""), Path(args.target or ""))
    elif config.data.too_long == "drop" and not args.truncate:
        # a prepared split is scored as a run scores it (the same pairs left out)
        pairs, dropped = scored_pairs(tokenizer, config, args.split, model.config.max_len)
    else:
        pairs = load_pairs(config, args.split)
    scores = evaluate_model(model, tokenizer, pairs, config.decode, truncate=truncate)
    if dropped:
        scores["pairs_dropped_too_long"] = dropped
    print(summary(scores))
    if args.output:
        Path(args.output).write_text(json.dumps(scores, indent=2, ensure_ascii=False))
    return 0


def register(commands) -> None:
    translate = commands.add_parser("translate", help="train and evaluate an encoder-decoder")
    actions = translate.add_subparsers(dest="translate_command", required=True)
    train = actions.add_parser("train", help="label-smoothed training, then dev/test BLEU")
    add_options(train)
    train.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    add_overwrite_option(train)
    train.set_defaults(func=run_train)
    evaluate = actions.add_parser("eval", help="greedy and beam search BLEU / chrF of a model")
    evaluate.add_argument(
        "--model", required=True, help="a model directory written by translate train"
    )
    add_options(evaluate)
    evaluate.add_argument("--split", default="test", help="dev | test of the prepared pairs")
    evaluate.add_argument("--source", help="your own source file, one segment per line")
    evaluate.add_argument("--target", help="its line-aligned reference translations")
    evaluate.add_argument(
        "--truncate",
        action="store_true",
        help="cut sources longer than the model's max_len (reported) instead of failing; a "
        "prepared split otherwise follows data.too_long as a run does (drop: those pairs are "
        "left out and counted), while your own --source lines are never dropped",
    )
    add_device_option(evaluate)
    evaluate.set_defaults(func=run_eval)
    combine = actions.add_parser(
        "combine",
        help="one report (table, paired tests, curves) of translation runs trained apart",
        description="Reads finished runs of `posattn compare --task translation` outputs "
        "(each of one encoding, or one encoding's folder of one) and writes the report a single "
        "compare would write, with the settings in which the arms differ besides encoding and "
        "seed. Every run must have been scored on the same test sentences.",
    )
    combine.add_argument(
        "runs", nargs="+", metavar="NAME=DIR", help="an arm: its name and its run directory"
    )
    combine.add_argument("--output", required=True, help="where results.md/json go")
    combine.add_argument(
        "--all-pairs",
        action="store_true",
        help="a paired test of every pair of arms (default: each against the first)",
    )
    combine.add_argument(
        "--confidence",
        type=float,
        default=0.95,
        help="the level of the intervals over training seeds (default 0.95; 0.975 for a "
        "second look at seeds added after a first, two looks at 95%% together)",
    )
    combine.set_defaults(func=run_combine)
    rescore = actions.add_parser(
        "rescore",
        help="decode finished runs again with a length penalty chosen on the dev pairs",
        description="For each finished run under RUNS (a compare --task translation output of "
        "one encoding, or its encoding's folder): beam search on the dev pairs at each length "
        "penalty, the one with the highest dev BLEU chosen, the test pairs decoded with it. "
        "Writes OUTPUT/<encoding>/seed<S>/ as runs `translate combine` reads (the chosen "
        "penalty shows there as a setting); a run rescored with the same candidates is reused.",
    )
    rescore.add_argument("runs", metavar="RUNS", help="a directory of finished runs")
    rescore.add_argument("--output", required=True, help="where the rescored runs go")
    rescore.add_argument(
        "--length-penalties",
        required=True,
        help="the candidates, comma-separated (e.g. 0.6,1.0,1.5)",
    )
    rescore.add_argument("--data-dir", help="the prepared data the runs were trained on")
    add_device_option(rescore)
    rescore.set_defaults(func=run_rescore)


def run_combine(args: argparse.Namespace) -> int:
    from .combine import combine_runs

    combine_runs(args.runs, Path(args.output), args.all_pairs, args.confidence)
    return 0


def run_rescore(args: argparse.Namespace) -> int:
    from .rescore import parse_penalties, rescore_runs

    penalties = parse_penalties(args.length_penalties)
    tunings = rescore_runs(
        Path(args.runs), Path(args.output), penalties, data_dir=args.data_dir, device=args.device
    )
    for seed, tuning in sorted(tunings.items()):
        dev = ", ".join(
            f"{alpha}: {scores['bleu']:.2f}" for alpha, scores in tuning["candidates"].items()
        )
        print(f"seed {seed}: dev BLEU by length penalty {dev}; chosen {tuning['chosen']}")
    return 0


def run_compare(args: argparse.Namespace) -> int:
    """compare --task translation: the lab's compare options, translation presets."""
    from .compare import compare_translation

    preset = args.preset or "quick"
    config = load_translation_config(preset, args.config, args.overrides)
    if args.data_dir:
        config = replace(config, data=replace(config.data, data_dir=args.data_dir))
    if args.encodings:
        config = replace(config, encodings=names_of("--encodings", args.encodings))
    output = Path(args.output or f"runs/compare-translation-{preset}")
    with run_lock(output, "posattn compare --task translation"):
        compare_translation(config, output, preset, overwrite=getattr(args, "overwrite", False))
        finish_distributed()
    return 0
