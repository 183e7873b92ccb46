"""`posattn import-bert`: a posattn model started from a real BERT checkpoint."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from ...errors import invalid
from ...models import PosAttnForMaskedLM
from ...models.bert_import import import_bert
from ...option_lists import value_of
from ..runs.model_card import write_model_card

TOKENIZER_FILES = (
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)


def parse_options(pairs: list[str]) -> dict:
    """["rank=64", "sharing=layer"] -> {"rank": 64, "sharing": "layer"} (values read as JSON
    where they parse, else as strings)."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise invalid("--option", pair, "KEY=VALUE, e.g. --option rank=64")
        options[key] = value_of(value)
    return options


def run_import_bert(args: argparse.Namespace) -> int:
    model = import_bert(
        args.path, args.encoding, parse_options(args.option), model_class=PosAttnForMaskedLM
    )
    output = Path(args.output or f"runs/import-bert-{args.encoding}")
    model.save_pretrained(output)
    write_model_card(
        output, model.config, metrics={"imported_from": str(args.path)}, kind="imported BERT"
    )
    for name in TOKENIZER_FILES:
        if (Path(args.path) / name).is_file():
            shutil.copy2(Path(args.path) / name, output / name)
    print(
        f"wrote {output} ({args.encoding}, {sum(p.numel() for p in model.parameters()):,} params)"
    )
    return 0


def register(commands) -> None:
    parser = commands.add_parser(
        "import-bert",
        help="start a posattn masked-LM model from a transformers BERT checkpoint directory",
    )
    parser.add_argument("path", help="directory with config.json and model.safetensors")
    parser.add_argument("--encoding", default="learned", help="posattn encoding (posattn list)")
    parser.add_argument(
        "--option", action="append", default=[], help="encoding option KEY=VALUE (repeatable)"
    )
    parser.add_argument("--output", help="run directory to write (default runs/import-bert-NAME)")
    parser.set_defaults(func=run_import_bert)
