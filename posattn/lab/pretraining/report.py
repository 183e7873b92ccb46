"""The comparison table (TUPE Table 1 / DIET Table 2 shape), honest about seed noise."""

from __future__ import annotations

from ..runs.tables import markdown_table as table
from ..runs.verdicts import Spread, verdict_lines


def fmt_score(task: dict) -> str:
    return (
        f"{100 * task['test_median']:.1f} "
        f"[{100 * task['test_min']:.1f}-{100 * task['test_max']:.1f}]"
    )


def verdicts(results: dict, tasks: list[str]) -> list[str]:
    """Name a best encoding for a task only where its worst seed beats every other's best."""
    lines = []
    for task in tasks:
        spreads = {
            e: Spread(s["test_median"], s["test_min"], s["test_max"])
            for e, s in ((e, r["finetune"][task]) for e, r in results.items())
        }
        lines += verdict_lines(task, spreads)
    return lines


def step_time(timing: dict, base: dict | None, key: str) -> str:
    if base is None:
        return f"{timing[key]:.1f}"
    return f"{timing[key]:.1f} ({100 * (timing[key] / base['timing'][key] - 1):+.0f}%)"


def markdown_table(results: dict, tasks: list[str], baseline: str | None) -> str:
    header = ["encoding", "params", "MLM val loss", *tasks, "avg", "train ms", "infer ms"]
    rows = []
    base = results.get(baseline) if baseline else None
    for encoding, r in results.items():
        scores = [r["finetune"][t]["test_median"] for t in tasks]
        compare_to = None if encoding == baseline else base
        row = [
            f"`{encoding}`",
            f"{r['pretrain']['parameters'] / 1e6:.2f}M",
            f"{r['pretrain']['final_eval_loss']:.3f}",
            *(fmt_score(r["finetune"][t]) for t in tasks),
            f"{100 * sum(scores) / len(scores):.1f}",
            step_time(r["timing"], compare_to, "train_ms"),
            step_time(r["timing"], compare_to, "infer_ms"),
        ]
        rows.append(row)
    return table(header, rows)


def results_markdown(results: dict, tasks: list[str], context: dict) -> str:
    baseline = "learned" if "learned" in results else None
    parts = [
        "# posattn compare",
        "",
        f"Preset `{context['preset']}`, {context['machine']}. Scores: test accuracy (%) of the "
        "dev-best epoch, median over seeds at the best learning rate, [min-max over seeds]. "
        "Step times: median ms per train step / forward pass"
        + (f", change relative to `{baseline}`." if baseline else "."),
        "",
        markdown_table(results, tasks, baseline),
        "",
        "## Verdicts",
        *verdicts(results, tasks),
        "",
        f"Wall time: {context['wall_seconds'] / 60:.1f} min.",
    ]
    return "\n".join(parts) + "\n"
