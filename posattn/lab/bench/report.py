"""bench.md: the attention and model levels, the long sequences, the targets and what a
kernel refused, as markdown tables."""

from __future__ import annotations

import dataclasses

from ... import execution
from ..runs.tables import table_lines
from .environment import settings_line

# DIET Table 1: step-time increase over BERT (TPU v2), BERT-small rows.
PAPER_TABLE1 = {
    "shaw": {"train": 24, "infer": 65},
    "tupe-r": {"train": 4, "infer": 27},
    "diet-abs": {"train": 0, "infer": 1},
    "diet-rel": {"train": 0, "infer": 0},
}


def label(row: dict) -> str:
    """The encoding, with its kernel when it is not the default one."""
    kernel = row.get("kernel", "auto")
    return row["encoding"] if kernel == "auto" else f"{row['encoding']} [{kernel}]"


def chosen_line(context: dict) -> list[str]:
    """The execution choices that differ from posattn's defaults (`--choose`), as a line."""
    defaults = dataclasses.asdict(execution.Choices())
    chosen = {k: v for k, v in context.get("execution", {}).items() if defaults.get(k) != v}
    if not chosen:
        return []
    return ["", "Execution choices: " + ", ".join(f"{k}={v}" for k, v in chosen.items()) + "."]


def options_line(context: dict) -> list[str]:
    """The encoding options given over the bench's own (`--option`), as a line."""
    given = context.get("encoding_options") or {}
    if not given:
        return []
    pairs = [f"{name}.{key}={value}" for name, keys in given.items() for key, value in keys.items()]
    return ["", "Encoding options: " + ", ".join(pairs) + "."]


def markdown(attention_rows: list[dict], model_rows: list[dict], context: dict) -> str:
    method = (
        f"{context['machine']}, torch {context['torch']}. Medians of {context['repeats']} runs "
        "after a warm-up; ratios to SDPA without a bias, alternated call by call in the same "
        "process. Memory: extra peak MiB of tensors one call holds (on GPU torch's allocator, "
        "on CPU torch.profiler's allocation events)."
    )
    lines = [
        "# posattn bench",
        "",
        " ".join(filter(None, (method, settings_line(context)))),
        *chosen_line(context),
        *options_line(context),
        "",
        "## Attention level (ratio to no-bias SDPA; extra peak MiB)",
        "",
    ]
    lengths = sorted({r["n"] for r in attention_rows})
    header = ["encoding"] + [f"{mode} n={n}" for mode in ("fwd", "train") for n in lengths]
    rows = []
    names = list(dict.fromkeys(label(r) for r in attention_rows))
    cell = {(label(r), r["n"], r["train"]): r for r in attention_rows}
    for name in names:
        cells = [name]
        for train in (False, True):
            for n in lengths:
                r = cell.get((name, n, train))  # None: skipped there (out of memory, refused)
                cells.append("-" if r is None else f"{r['ratio']:.2f} ({r['extra_mib']:.0f})")
        rows.append(cells)
    lines += table_lines(header, rows)
    if not model_rows:  # --model-lengths ''
        return "\n".join(lines) + "\n"
    dropout = context.get("attention_dropout", 0.0)
    lines += [
        "",
        "## Model level: BERT-small (4 x 512, 8 heads), +% over `learned`"
        + (f", attention dropout {dropout}" if dropout else ""),
        "",
    ]
    header = [
        "encoding",
        "n",
        "train ms",
        "train +% (least, greatest)",
        "infer ms",
        "infer +% (least, greatest)",
        "DIET Table 1 (train / infer)",
    ]
    rows = []
    for r in model_rows:
        paper = PAPER_TABLE1.get(r["encoding"])
        rows.append([
            label(r), r["n"], f"{r['train_ms']:.1f}",
            with_spread(r.get("train_pct", 0), r.get("train_pct_range"), "+.1f"),
            f"{r['infer_ms']:.1f}",
            with_spread(r.get("infer_pct", 0), r.get("infer_pct_range"), "+.1f"),
            f"+{paper['train']}% / +{paper['infer']}%" if paper else "-",
        ])  # fmt: skip
    lines += table_lines(header, rows)
    return "\n".join(lines) + "\n"


def with_spread(value: float, spread: list[float] | None, spec: str) -> str:
    """A median formatted by `spec`, with the least and greatest of its alternated pairs where
    they were measured."""
    text = format(value, spec)
    if spread is None:
        return text
    return f"{text} ({format(spread[0], spec)}, {format(spread[1], spec)})"


def targets_markdown(checks: list[dict]) -> str:
    if not checks:
        return ""
    measured = [with_spread(c["measured"], c.get("spread"), ".2f") for c in checks]
    rows = [
        [c["target"], cell, "yes" if c["met"] else "no"]
        for c, cell in zip(checks, measured, strict=True)
    ]
    header = ["target", "measured (least, greatest of the pairs)", "met"]
    lines = ["", "## Targets", "", *table_lines(header, rows)]
    return "\n".join(lines) + "\n"


def skipped_markdown(skipped: list[dict]) -> str:
    """The (encoding, kernel) pairs a kernel refused, once each, with its reason."""
    reasons = {(r["encoding"], r["kernel"]): r["reason"] for r in skipped}
    if not reasons:
        return ""
    rows = [[encoding, kernel, reason] for (encoding, kernel), reason in reasons.items()]
    lines = ["", "## Skipped", "", *table_lines(["encoding", "kernel", "why"], rows)]
    return "\n".join(lines) + "\n"


def long_markdown(rows: list[dict]) -> str:
    if not rows:  # --long-lengths ''
        return ""
    lines = [
        "",
        "## Long sequences: DIET-ABS in Linformer (k=32) vs full attention with DIET-ABS",
        "",
    ]
    header = ["n", "diet-abs ms", "diet-abs MiB", "diet-abs-lin ms", "diet-abs-lin MiB"]
    cells = []
    for n in sorted({r["n"] for r in rows}):
        full = next(r for r in rows if r["n"] == n and r["encoding"] == "diet-abs")
        lin = next(r for r in rows if r["n"] == n and r["encoding"] == "diet-abs-lin")
        cells.append(
            [n, f"{full['ms']:.1f}", f"{full['extra_mib']:.0f}", f"{lin['ms']:.1f}",
             f"{lin['extra_mib']:.0f}"]
        )  # fmt: skip
    lines += table_lines(header, cells)
    return "\n".join(lines) + "\n"
