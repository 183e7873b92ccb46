"""The `posattn` command. Each command module adds its subcommand with `register(commands)`."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table

from .encodings import ENCODINGS, REQUIRED, option_defaults
from .errors import PosAttnConfigError, invalid
from .lab.runs.denormals import choose_denormals
from .lab.runs.freed_memory import choose_freed_memory


def encoding_rows() -> list[tuple[str, str, str, str, str, str]]:
    """(name, paper, equation, places, cost, options) for every registered encoding."""
    rows = []
    for name, cls in ENCODINGS.items():
        places = ", ".join(place.value for place in cls.places) or "-"
        options = ", ".join(
            f"{k} (required)" if v is REQUIRED else f"{k}={v!r}"
            for k, v in option_defaults(name).items()
        )
        rows.append((name, cls.paper, cls.equation, places, cls.cost, options or "-"))
    return rows


HEADER = ("encoding", "paper", "equation", "where it acts", "cost", "options (defaults)")


def list_encodings(args: argparse.Namespace) -> int:
    rows = encoding_rows()
    if args.markdown:
        print("| " + " | ".join(HEADER) + " |")
        print("|" + "---|" * len(HEADER))
        for row in rows:
            cells = [f"`{row[0]}`", *row[1:]]
            print("| " + " | ".join(cells) + " |")
        return 0
    table = Table(title="posattn encodings")
    for column in HEADER:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    Console(width=200).print(table)
    return 0


def register(commands) -> None:
    listing = commands.add_parser("list", help="every encoding with its paper, equation and cost")
    listing.add_argument("--markdown", action="store_true", help="print a markdown table")
    listing.set_defaults(func=list_encodings)


def command_modules() -> list:
    from .data import commands as data_commands
    from .lab.bench import command as bench_command
    from .lab.import_bert import command as import_command
    from .lab.inspection import command as inspect_command
    from .lab.pretraining import commands as pretraining_commands
    from .lab.probe import command as probe_command
    from .lab.report import command as report_command
    from .lab.translation import commands as translation_commands

    return [
        register,
        data_commands.register,
        import_command.register,
        pretraining_commands.register,
        register_compare,
        bench_command.register,
        inspect_command.register,
        report_command.register,
        probe_command.register,
        translation_commands.register,
    ]


def run_compare(args: argparse.Namespace) -> int:
    """`compare --task T` runs the comparison of the lab peer that owns task T."""
    from .lab.pretraining.commands import run_compare as compare_pretraining
    from .lab.pretraining.commands import run_compare_xlingual as compare_xlingual
    from .lab.translation.commands import run_compare as compare_translation

    if args.adopt and args.task != "pretraining":
        raise invalid(
            "--adopt",
            args.adopt,
            f"only with --task pretraining, not {args.task} (translation runs trained apart "
            "join a comparison through `posattn translate combine`)",
        )
    runners = {
        "pretraining": compare_pretraining,
        "translation": compare_translation,
        "xlingual": compare_xlingual,
    }
    return runners[args.task](args)


def register_compare(commands) -> None:
    from .lab.runs.options import add_run_options

    parser = commands.add_parser(
        "compare", help="pretrain and fine-tune every encoding, then compare (the main job)"
    )
    parser.add_argument("--encodings", help="comma-separated encodings (default: the preset's)")
    parser.add_argument(
        "--task",
        choices=("pretraining", "translation", "xlingual"),
        default="pretraining",
        help="pretraining: MLM + fine-tuning (default); translation: encoder-decoders, BLEU; "
        "xlingual: multilingual MLM, English fine-tuning, zero-shot in other languages "
        "(presets smoke, quick)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="discard stages in --output written with other settings (default: refuse them)",
    )
    parser.add_argument(
        "--adopt",
        action="append",
        default=[],
        metavar="RUN_DIR",
        help="a finished `posattn pretrain` run to take as the pretraining cell of the same "
        "settings instead of training it again (hard-linked in; repeatable)",
    )
    add_run_options(parser, None)
    parser.set_defaults(func=run_compare)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="posattn", description="Positional encoding for Transformers: TUPE, DIET and peers."
    )
    parser.add_argument(
        "--keep-denormals",
        action="store_true",
        help="compute with IEEE subnormal floats on the CPU (default: flushed to zero, which "
        "made ALiBi training 2-2.6x faster on an Intel CPU; see docs/cost.md)",
    )
    parser.add_argument(
        "--release-memory",
        action="store_true",
        help="return freed CPU memory to the system at once, glibc's default (default: keep "
        "blocks below 1 GiB for reuse, which took Shaw's training at n=1024 from 2.3x to "
        "1.6x bias-free attention; see docs/cost.md)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for add_commands in command_modules():
        add_commands(commands)
    return parser


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """argparse, except that KEY=VALUE overrides may also follow options given after a
    command's positional (`posattn finetune DIR --preset smoke finetune.seeds=[0]`): argparse
    fills every positional at its first chance and would reject them as unrecognised."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and hasattr(args, "overrides") and all("=" in a and a[0] != "-" for a in extra):
        args.overrides = [*(args.overrides or []), *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run a command; bad input raises `PosAttnConfigError` (for callers and tests)."""
    args = parse_arguments(argv)
    # Before any torch work, so that every thread torch starts inherits it.
    choose_denormals(args.keep_denormals)
    choose_freed_memory(args.release_memory)
    return args.func(args)


def entry(argv: list[str] | None = None) -> int:
    """The console command: bad input is one line on stderr and exit status 2, like
    argparse's own errors, instead of a traceback."""
    try:
        return main(argv)
    except PosAttnConfigError as error:
        print(f"posattn: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(entry())
