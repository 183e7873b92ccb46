"""The probe tables: rows are encodings, columns tasks x (training length, longest length)."""

from __future__ import annotations

from ..runs.tables import table_lines
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


def table(results: dict, settings: ProbeSettings, metric: str) -> list[str]:
    shortest, longest = min(settings.test_lens), max(settings.test_lens)
    header = ["encoding"]
    for task in settings.tasks:
        header += [f"{task} @{shortest}", f"{task} @{longest}"] if longest > shortest else [task]
    rows = []
    for encoding in settings.encodings:
        row = [f"`{encoding}`"]
        for task in settings.tasks:
            result = results[task][encoding]
            row.append(cell_text(result, shortest, metric))
            if longest > shortest:
                row.append(cell_text(result, longest, metric))
        rows.append(row)
    return table_lines(header, rows)


def results_markdown(results: dict, settings: ProbeSettings) -> str:
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
        "positions.",
        "",
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
    ]
    return "\n".join(parts)
