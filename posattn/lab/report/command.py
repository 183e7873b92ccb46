"""`posattn report RUN_DIR`."""

from __future__ import annotations

import argparse


def run_report(args: argparse.Namespace) -> int:
    from .collect import collect
    from .render import write_report

    contents = collect(args.run_dir)
    page, text = write_report(contents, embed=args.embed)
    print(
        f"{page} ({len(contents.figures)} figures, {len(contents.markdown)} markdown files, "
        f"{len(contents.json)} JSON summaries) and {text}"
    )
    return 0


def register(commands) -> None:
    parser = commands.add_parser(
        "report", help="one static HTML page (and markdown) of a compare/bench/inspect/probe run"
    )
    parser.add_argument("run_dir", help="the run directory")
    parser.add_argument("--embed", action="store_true", help="inline the figures in the HTML")
    parser.set_defaults(func=run_report)
