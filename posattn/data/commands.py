"""`posattn data prepare`: build the data directory and print what it holds."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.table import Table

from ..errors import PosAttnConfigError, invalid, named_as_flags
from ..option_lists import names_of
from .archive import pack, unpack
from .build import MissingSources, prepare
from .corpora import BUILTIN_CORPORA, DEFAULT_CORPUS
from .layout import CORPUS_SPLITS, SPLITS, paths
from .manifest import read_manifest
from .parallel import PARALLEL
from .tasks import TASKS
from .tokenizer import DEFAULT_VOCAB_SIZE
from .xlingual import DEFAULT_LANGUAGES

EPILOG = f"""\
The MLM corpus (--builtin-corpus): books (default: six Austen novels, Moby Dick, three more
novels, two English Bibles, WordNet's glosses) or news (the BBC articles that topic,
word-order and sentence-order all keep for training: in-domain text, no dev or test article).
Your own data, where a package cannot be had or to use other text:
  --corpus FILE     UTF-8 text, one paragraph per line; replaces the built-in corpus.
  --task NAME=FILE  JSON Lines, one example per line:
                      {{"text": "...", "label": "..."}}                      single segment
                      {{"text": "...", "text_pair": "...", "label": "..."}}  pair task
                    optional "id", and "split" ("train", "dev", "test"); rows without
                    a split are split 80/10/10 by a hash of their text.
                    A built-in NAME keeps its labels and replaces the packaged data:
                      {", ".join(TASKS)}
                    any other NAME takes the labels found in the file.
Translation sets (--translation): en-es (KJV -> Reina-Valera verses, 5.5 MB of packages) and
cs-en (Debian handbook paragraphs, a 35 MB package), each written as line-aligned
translation/NAME/SPLIT.LANG (train, dev, test) with a shared BPE tokenizer; a pair of your own
files is read by `posattn translate eval --source FILE --target FILE`.
Cross-lingual set (--xlingual): the handbook's pages in the given languages (en-US first),
untranslated blocks dropped, split by page; English-only training files and a test file per
language for `posattn compare --task xlingual` (xlingual/, with its own tokenizer).
The data directory is --data-dir, else $POSATTN_DATA_DIR, else
$XDG_CACHE_HOME/posattn/data (~/.cache/posattn/data).
"""


def task_argument(value: str) -> tuple[str, str]:
    name, sep, path = value.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(str(invalid("--task", value, "NAME=FILE")))
    return name, path


def name_list(option: str):
    """The argparse type of a comma-separated option ('' for none): its names, none
    repeated."""

    def parse(value: str) -> list[str]:
        try:
            return names_of(option, value, none_allowed=True)
        except PosAttnConfigError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse


def task_files_of(pairs: list[tuple[str, str]] | None) -> dict[str, str]:
    """--task NAME=FILE pairs as a dict; a name given twice is refused (dict() would keep its
    last file and drop the first without a word)."""
    names = [name for name, _ in pairs or []]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise invalid("--task", ", ".join(repeated), "one file a task name")
    return dict(pairs or [])


def run_prepare(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    try:
        with named_as_flags(*vars(args)):
            layout = prepare(
                args.data_dir,
                tasks=args.tasks,
                corpus=args.corpus,
                task_files=task_files_of(args.task),
                vocab_size=args.vocab_size,
                quiet=args.quiet,
                translations=args.translation,
                xlingual=args.xlingual,
                builtin_corpus=args.builtin_corpus,
            )
    except PosAttnConfigError as error:
        console.print(f"posattn: error: {error}", highlight=False, markup=False, soft_wrap=True)
        return 2
    except MissingSources as missing:
        if not args.quiet:
            print_summary(paths(args.data_dir).root)
        console.print(str(missing), highlight=False, markup=False, soft_wrap=True)
        return 1
    if not args.quiet:
        print_summary(layout.root)
    return 0


def print_summary(root) -> None:
    manifest = read_manifest(paths(root).manifest)
    console = Console()
    console.print(f"data directory: {root}", highlight=False)
    corpus: dict[str, Any] = manifest.get("corpus", {})
    tokens = manifest.get("tokenizer", {}).get("corpus_tokens", {})
    if corpus:
        table = Table(title=f"corpus ({corpus.get('builtin') or 'your files'})")
        for column in ("split", "paragraphs", "words", "MB", "tokens"):
            table.add_column(column, justify="right")
        for split in CORPUS_SPLITS:
            megabytes = f"{corpus['bytes'][split] / 1e6:.2f}"
            row = (corpus["paragraphs"][split], corpus["words"][split], megabytes)
            table.add_row(split, *map(str, row), str(tokens.get(split, "-")))
        console.print(table)
    tasks = manifest.get("tasks", {})
    if tasks:
        table = Table(title="tasks")
        for column in ("task", *SPLITS, "labels (train)"):
            table.add_column(column)
        for name, step in sorted(tasks.items()):
            sizes = [str(step["examples"][split]) for split in SPLITS]
            labels = ", ".join(f"{k} {v}" for k, v in step["labels"]["train"].items())
            table.add_row(name, *sizes, labels if len(labels) < 90 else labels[:87] + "...")
        console.print(table)
    translation = manifest.get("translation", {})
    if translation:
        table = Table(title="translation (pairs)")
        for column in ("set", *SPLITS, "dropped", "vocab"):
            table.add_column(column)
        for name, step in sorted(translation.items()):
            sizes = [str(step["pairs"][split]) for split in SPLITS]
            table.add_row(name, *sizes, str(step["dropped"]), str(step["vocab_size"]))
        console.print(table)
    xlingual = manifest.get("xlingual", {})
    if xlingual:
        table = Table(title="cross-lingual set (blocks kept, test examples)")
        for column in ("language", "blocks kept", "dropped", *xlingual["examples"]):
            table.add_column(column)
        for language in xlingual["languages"]:
            tests = [str(c[f"test.{language}"]) for c in xlingual["examples"].values()]
            row = (xlingual["blocks_kept"][language], xlingual["blocks_dropped"][language])
            table.add_row(language, *map(str, row), *tests)
        console.print(table)
    if "last_prepare_seconds" in manifest:
        console.print(f"last prepare: {manifest['last_prepare_seconds']} s", highlight=False)


def register(commands) -> None:
    data = commands.add_parser("data", help="corpus, tokenizer and fine-tuning tasks")
    actions = data.add_subparsers(dest="data_command", required=True)
    build = actions.add_parser(
        "prepare",
        help="fetch the packages and build corpus, tokenizer and tasks (idempotent)",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    build.add_argument("--data-dir", help="where to build (default: see below)")
    build.add_argument(
        "--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE, help="WordPiece vocabulary size"
    )
    build.add_argument(
        "--tasks",
        type=name_list("--tasks"),
        default=None,
        help=f"built-in tasks to build, comma-separated, '' for none (default: {','.join(TASKS)})",
    )
    build.add_argument(
        "--translation",
        type=name_list("--translation"),
        default=list(PARALLEL),
        help=f"parallel sets, comma-separated, '' for none (default: {','.join(PARALLEL)})",
    )
    build.add_argument(
        "--xlingual",
        type=name_list("--xlingual"),
        default=list(DEFAULT_LANGUAGES),
        help="handbook languages of the cross-lingual set, comma-separated, '' for none "
        f"(default: {','.join(DEFAULT_LANGUAGES)})",
    )
    build.add_argument(
        "--builtin-corpus",
        default=DEFAULT_CORPUS,
        help=f"the built-in MLM corpus: {', '.join(BUILTIN_CORPORA)} (default: {DEFAULT_CORPUS})",
    )
    build.add_argument(
        "--corpus", action="append", metavar="FILE", help="your own corpus (repeatable)"
    )
    build.add_argument(
        "--task",
        action="append",
        type=task_argument,
        metavar="NAME=FILE",
        help="your own task (repeatable)",
    )
    build.add_argument("--quiet", action="store_true", help="no progress bars or summary")
    build.set_defaults(func=run_prepare)
    register_archive(actions)


def run_pack(args: argparse.Namespace) -> int:
    return report_archive(pack(args.data_dir, args.archive), f"wrote {args.archive}")


def run_unpack(args: argparse.Namespace) -> int:
    return report_archive(unpack(args.archive, args.data_dir), "unpacked")


def report_archive(result: dict, done: str) -> int:
    """Bad input raises PosAttnConfigError, which `posattn`'s entry prints (exit status 2)."""
    details = ", ".join(f"{key} {value}" for key, value in result.items())
    Console(stderr=True).print(f"{done}: {details}", highlight=False, markup=False)
    return 0


def register_archive(actions) -> None:
    """pack / unpack: a prepared data directory carried to a machine without network."""
    packer = actions.add_parser(
        "pack",
        help="write the prepared data (built files and manifest, no sources) to a .tar.xz",
        description="For a machine that cannot fetch packages: pack here, copy the archive, "
        "then `posattn data unpack ARCHIVE` there. Every file is checked against the "
        "manifest's sha256 on both sides.",
    )
    packer.add_argument("archive", help="the .tar.xz to write")
    packer.add_argument("--data-dir", help="the prepared directory (default: as for prepare)")
    packer.set_defaults(func=run_pack)
    unpacker = actions.add_parser(
        "unpack", help="extract and check a `posattn data pack` archive into a new data directory"
    )
    unpacker.add_argument("archive", help="the .tar.xz written by `posattn data pack`")
    unpacker.add_argument("--data-dir", help="where to unpack (default: as for prepare)")
    unpacker.set_defaults(func=run_unpack)
