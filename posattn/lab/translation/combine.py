"""`posattn translate combine`: one report of translation runs trained apart.

A comparison often grows run by run: one encoding per process (two cores, two runs), a second
seed next week, an arm whose settings differ on purpose (DIET-REL at ten times the positional
learning rate). Each lives in its own `compare --task translation` output. This command reads
their finished runs under names the user gives (`NAME=DIR`) and writes the report a single
`compare` would have written - table, verdicts, paired tests, learning curves - plus what makes
such a report honest: every setting in which the arms differ besides encoding and seed (from
each run's stage.json), and a refusal where two arms were scored on other test sentences, which
a paired test cannot compare.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...data.identity import shortened
from ...errors import PosAttnConfigError, invalid, require
from ..runs.context import run_context
from ..runs.fingerprint import differences
from ..runs.stages import DATA_KEY, STAGE_FILE
from ..runs.statistics import DEFAULT_CONFIDENCE, require_confidence
from .report import significance
from .report_files import write_report

RESULT = "metrics.json"
# A run's data digests (stage.json's "data") join its settings under this key: arms trained
# on other prepared data then show as a setting difference.
DIGESTS = "data_digests"
# What names an arm's runs apart from each other: not a setting difference between arms.
PER_RUN_KEYS = ("model.encoding", "train.seed")


def parse_spec(spec: str) -> tuple[str | None, Path]:
    """'NAME=DIR' -> (NAME, DIR); 'DIR' -> (None, DIR): the arm is then named by its encoding."""
    name, sep, directory = spec.partition("=")
    if not sep:
        return None, Path(spec)
    require(bool(name and directory), "runs", spec, "NAME=DIR or DIR, NAME and DIR not empty")
    return name, Path(directory)


def seed_directories(directory: Path) -> list[Path]:
    """The finished runs of one arm: DIR/seed*/ (an encoding's folder of a compare output), or
    DIR/<encoding>/seed*/ where a compare output holds one encoding."""
    require(directory.is_dir(), "runs", str(directory), "an existing run directory")
    found = sorted(p.parent for p in directory.glob(f"seed*/{RESULT}"))
    if found:
        return found
    encodings = sorted({p.parent.parent for p in directory.glob(f"*/seed*/{RESULT}")})
    require(
        len(encodings) == 1,
        "runs",
        str(directory),
        "a directory with finished runs (seed*/metrics.json) of one encoding: a compare "
        "output of one encoding, or one encoding's folder of it"
        + (f" (this one holds {', '.join(p.name for p in encodings)})" if encodings else ""),
    )
    return sorted(p.parent for p in encodings[0].glob(f"seed*/{RESULT}"))


def read_run(directory: Path) -> tuple[dict, dict]:
    """(metrics, settings) of one finished run; settings from its stage.json, with the data
    digests it recorded (DIGESTS)."""
    metrics = json.loads((directory / RESULT).read_text(encoding="utf-8"))
    stage = directory / STAGE_FILE
    if not stage.is_file():
        raise invalid("runs", str(directory), f"a finished run with its {STAGE_FILE}")
    require(
        "test" in metrics.get("evaluation", {}),
        "runs",
        str(directory),
        "a run scored on the test pairs (decode.splits with 'test'), as compare scores them",
    )
    record = json.loads(stage.read_text(encoding="utf-8"))
    settings = record.get("settings", {})
    if DATA_KEY in record:  # shortened as a report shows them
        settings = {**settings, DIGESTS: shortened(record[DATA_KEY])}
    return metrics, settings


def without_run_keys(settings: dict) -> dict:
    """Settings with the keys that tell an arm's runs apart (encoding, seed) removed."""
    plain = json.loads(json.dumps(settings))
    for key in PER_RUN_KEYS:
        section, _, leaf = key.partition(".")
        plain.get(section, {}).pop(leaf, None)
    return plain


def unfinished_runs(finished: list[Path]) -> list[str]:
    """The seed folders beside an arm's finished runs that hold no result yet (still training,
    or killed): left out of the report, and named there."""
    folder = finished[0].parent
    return sorted(str(p) for p in folder.glob("seed*") if p.is_dir() and not (p / RESULT).exists())


def load_arms(specs: list[str]) -> tuple[dict, dict, dict, dict]:
    """({arm: {seed: metrics}}, {arm: {seed: settings}}, {arm: [directories]}, {arm: unfinished
    seed folders}) in the given order. A name given again adds that directory's seeds to the
    arm (seeds trained in separate outputs); a seed found twice is refused."""
    require(len(specs) >= 1, "runs", specs, "at least one NAME=DIR")
    results: dict[str, dict[int, dict]] = {}
    settings: dict[str, dict[int, dict]] = {}
    sources: dict[str, list[str]] = {}
    unfinished: dict[str, list[str]] = {}
    for spec in specs:
        name, directory = parse_spec(spec)
        finished = seed_directories(directory)
        runs = [read_run(d) for d in finished]
        name = name or runs[0][0]["encoding"]
        for metrics, run_settings in runs:
            seed = metrics["seed"]
            require(
                seed not in results.get(name, {}),
                "runs",
                spec,
                f"seeds not given twice for one arm ({name!r} seed {seed} is also in "
                f"{', '.join(sources.get(name, []))})",
            )
            results.setdefault(name, {})[seed] = metrics
            settings.setdefault(name, {})[seed] = run_settings
        sources.setdefault(name, []).append(str(directory))
        unfinished.setdefault(name, []).extend(unfinished_runs(finished))
    return results, settings, sources, {arm: found for arm, found in unfinished.items() if found}


def check_same_test_pairs(results: dict, sources: dict) -> None:
    """Every run was scored on the first run's test sentences, in its order."""
    first_arm = next(iter(results))
    references = next(iter(results[first_arm].values()))["evaluation"]["test"]["references"]
    for arm, runs in results.items():
        for seed, metrics in runs.items():
            if metrics["evaluation"]["test"]["references"] != references:
                raise PosAttnConfigError(
                    f"runs: {arm} (seed {seed}, {', '.join(sources[arm])}) was scored on other "
                    f"test sentences than {first_arm}: a paired comparison needs the same ones "
                    "(same data.pairs, data.reverse, data.max_eval_pairs and model.max_len)"
                )


def setting_differences(settings: dict) -> dict[str, list[str]]:
    """{arm (or 'arm seed S'): ['key: first -> this', ...]} against the first arm's first run,
    encoding and seed left out; arms that differ in nothing are absent."""
    arms = iter(settings.items())
    _, first_runs = next(arms)
    reference = without_run_keys(next(iter(first_runs.values())))
    found = {}
    for arm, runs in settings.items():
        for seed, run_settings in runs.items():
            changed = differences(reference, without_run_keys(run_settings))
            label = arm if len(runs) == 1 else f"{arm} seed {seed}"
            if changed:
                found[label] = changed
    return found


def pairwise_tests(results: dict, against_first: dict) -> list[dict]:
    """sacrebleu's paired test of every later arm against every earlier one; the tests against
    the first arm are those already run (against_first), not run again."""
    arms = list(results)
    tests = []
    for i, base in enumerate(arms):
        for other in arms[i + 1 :]:
            test = against_first.get(other) if i == 0 else None
            test = test or significance({base: results[base], other: results[other]}).get(other)
            if test:
                tests.append({"system": other, **test})
    return tests


def combined_context(results: dict, settings: dict, sources: dict) -> dict:
    first = next(iter(next(iter(settings.values())).values()))
    run = next(iter(next(iter(results.values())).values()))
    penalties = sorted(
        {s["decode"]["length_penalty"] for by in settings.values() for s in by.values()}
    )
    runs = [m for by_seed in results.values() for m in by_seed.values()]
    machines = sorted({m["machine"] for m in runs if "machine" in m})
    return run_context(
        "combined",
        None,
        pairs=run["pairs"] + (" reversed" if run.get("reversed") else ""),
        beam_size=first["decode"]["beam_size"],
        # runs rescored with a penalty tuned on dev each have their own
        length_penalty=penalties[0]
        if len(penalties) == 1
        else " / ".join(map(str, penalties)) + " (per run)",
        machine=", ".join(machines) or "machines not recorded",
        train_seconds=sum(m.get("train_seconds", 0.0) for m in runs),
        sources=sources,
        command="posattn translate combine",
        data=combined_data(settings),
    )


def combined_data(settings: dict) -> dict | str:
    """The runs' data digests where every run read the same data; else why there is no one
    (the settings that differ name the runs)."""
    digests = [s.get(DIGESTS) for by_seed in settings.values() for s in by_seed.values()]
    if any(d is None for d in digests):
        return "not recorded by every run"
    if any(d != digests[0] for d in digests):
        return "differs between runs (see the settings that differ)"
    return digests[0]


def combine_runs(
    specs: list[str],
    output: Path,
    all_pairs: bool = False,
    confidence: float = DEFAULT_CONFIDENCE,
) -> dict:
    """Read the arms, check them and write output/results.{json,md} and curve.png (the
    intervals over training seeds at `confidence`)."""
    require_confidence("--confidence", confidence)  # before any run is read
    results, settings, sources, unfinished = load_arms(specs)
    check_same_test_pairs(results, sources)
    context = combined_context(results, settings, sources)
    tests = significance(results) if len(results) > 1 else {}
    extra = {"setting_differences": setting_differences(settings), "unfinished": unfinished}
    if all_pairs:
        extra["pairwise"] = pairwise_tests(results, tests)
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    return write_report(output, results, context, tests, extra, all_pairs, confidence)
