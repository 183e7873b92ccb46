"""The probe tables: rows are encodings, columns tasks x (training length, longest length)."""

from __future__ import annotations

from ..runs.tables import estimate_text, table_lines
from .settings import ProbeSettings
from .tasks import probe_task


def cell_text(result: dict, length: int, metric: str) -> str:
    """'97.1 ± 1.2' (percent, mean ± std over seeds), or why there is no number."""
    if result["status"] != "ok":
        return "n/a: " + unsupported_reason(result["reason"])
    at_length = result["lengths"][str(length)]
    if "status" in at_length:
        return at_length["status"]
    value = at_length[metric]
    return f"{100 * value['mean']:.1f} ± {100 * value['std']:.1f}"


def unsupported_reason(reason: str) -> str:
    if "causal attention only" in reason:
        return "causal only"
    if "bidirectional" in reason:
        return "not causal"
    return reason


def difference_text(difference: dict) -> str:
    """'+89.8 [+89.0, +90.6]' (points, the 95% interval over seeds), or why there is none."""
    if "status" in difference:
        return "n/a" if difference["status"] == "unsupported" else difference["status"]
    value, interval = difference["difference"], difference["interval"]
    return estimate_text(value, interval, signed=True, without_interval=" (one seed)")


def lengths_shown(settings: ProbeSettings) -> list[int]:
    """The training length, and the longest test length where there is one."""
    shortest, longest = min(settings.test_lens), max(settings.test_lens)
    return [shortest, longest] if longest > shortest else [shortest]


def header(settings: ProbeSettings) -> list[str]:
    shown = lengths_shown(settings)
    return ["encoding"] + [
        f"{task} @{length}" if len(shown) > 1 else task
        for task in settings.tasks
        for length in shown
    ]


def table(results: dict, settings: ProbeSettings, metric: str) -> list[str]:
    rows = [
        [f"`{encoding}`"]
        + [
            cell_text(results[task][encoding], length, metric)
            for task in settings.tasks
            for length in lengths_shown(settings)
        ]
        for encoding in settings.encodings
    ]
    return table_lines(header(settings), rows)


def paired_table(paired: dict, settings: ProbeSettings, metric: str) -> list[str]:
    rows = [
        [f"`{encoding}`"]
        + [
            difference_text(paired[task][encoding][str(length)][metric])
            for task in settings.tasks
            for length in lengths_shown(settings)
        ]
        for encoding in settings.encodings
        if encoding in paired[settings.tasks[0]]
    ]
    return table_lines(header(settings), rows)


def comparisons(paired: dict) -> int:
    """How many differences with a number the pairings hold (token accuracy, every length)."""
    return sum(
        "difference" in by_length[length]["token"]
        for by_task in paired.values()
        for by_encoding in by_task.values()
        for by_length in by_encoding.values()
        for length in by_length
    )


def paired_sections(paired: dict, settings: ProbeSettings) -> list[str]:
    lines = []
    count = comparisons(paired)
    for reference, by_task in paired.items():
        lines += [
            f"## Paired against `{reference}` (token accuracy, points)",
            "",
            f"Each encoding's token accuracy minus `{reference}`'s, seed by seed (a seed's cells "
            f"saw the same examples): the mean over {settings.seeds} seed(s) and its 95% "
            "t-interval; sign-flip p-values, and exact match, in results.json. "
            f"The run's pairings hold {count} difference{'s' * (count != 1)} of token accuracy "
            "(every reference and length): an interval here is one comparison's evidence, not "
            "the family's.",
            "",
            *paired_table(by_task, settings, "token"),
            "",
        ]
    return lines


def rate_lines(results: dict, settings: ProbeSettings) -> list[str]:
    """Which positional rate each (task, encoding) reports, where the run had candidates."""
    if len(settings.position_lr_scales) == 1:
        return []

    def chosen(result: dict) -> str:
        if result["status"] != "ok":
            return "n/a"
        return f"x{result['position_lr_scale']:g}" if len(result["rates"]) > 1 else "-"

    rows = [
        [f"`{encoding}`"] + [chosen(results[task][encoding]) for task in settings.tasks]
        for encoding in settings.encodings
    ]
    candidates = ", ".join(f"x{scale:g}" for scale in settings.position_lr_scales)
    return [
        "## Positional rate",
        "",
        f"Each encoding's own parameters trained at {candidates} the learning rate; every "
        "table reports, per task and encoding, the rate whose final training loss (examples "
        "drawn fresh at each step) was lowest on average over the seeds (-: no parameters of "
        "its own, one rate). Losses and accuracy at every rate: results.json's `rates`.",
        "",
        *table_lines(["encoding", *settings.tasks], rows),
        "",
    ]


def options_lines(settings: ProbeSettings) -> list[str]:
    """The options the run sets for its encodings (their variants' and `--option`'s), or
    nothing."""
    given = [
        f"`{name}` " + ", ".join(f"{key}={value!r}" for key, value in options.items())
        for name in settings.encodings
        if (options := settings.given_options(name))
    ]
    return ["Encoding options given: " + "; ".join(given) + ".", ""] if given else []


def word_scale_text(settings: ProbeSettings) -> str:
    """A run whose word vectors were scaled says so: its table is not the default model's."""
    if settings.word_scale is None:
        return ""
    return f" Word vectors multiplied by {settings.word_scale:g} (`--word-scale`)."


def results_markdown(results: dict, settings: ProbeSettings, paired: dict | None = None) -> str:
    tasks = [
        f"- `{name}` ({probe_task(name).model}): {probe_task(name).skill}"
        for name in settings.tasks
    ]
    parts = [
        "# posattn probe",
        "",
        f"Trained on lengths up to {settings.train_len} ({settings.steps} steps, batch "
        f"{settings.batch_size}, d={settings.d_model}, {settings.num_layers} layers), evaluated "
        f"on {settings.eval_examples} fresh examples per length; mean ± std over "
        f"{settings.seeds} seed(s), in percent. Position tables hold {settings.train_len} "
        "positions." + word_scale_text(settings),
        "",
        *options_lines(settings),
        "Tasks:",
        *tasks,
        "",
        "## Token accuracy",
        "",
        *table(results, settings, "token"),
        "",
        "## Exact match (every scored token of an example right)",
        "",
        *table(results, settings, "exact"),
        "",
        *rate_lines(results, settings),
        *paired_sections(paired or {}, settings),
    ]
    return "\n".join(parts)
