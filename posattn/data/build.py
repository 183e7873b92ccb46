"""`prepare`: fetch the sources, then build the corpus, the tokenizer and the tasks.

Each step is skipped when the manifest shows it was built from the same inputs and its files
are intact, so a second run only checks checksums. A source that cannot be fetched stops only
the parts that need it; the error at the end says what is missing and how to supply it.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from ..directory_lock import DirectoryLock
from ..errors import invalid, require, require_choice, require_positive_int
from . import corpus as corpus_sources
from .corpora import BUILTIN_CORPORA, CORPUS_RULES, DEFAULT_CORPUS
from .fetch import FetchError, fetch
from .layout import CORPUS_SPLITS, SPLITS, DataPaths, paths
from .manifest import (
    file_record,
    fingerprint,
    read_manifest,
    sha256_file,
    step_is_current,
    write_atomic,
    write_manifest,
)
from .parallel import BUILDERS as PARALLEL_BUILDERS
from .parallel import PAIRS_VERSION, PARALLEL, PARALLEL_FRACTIONS, ParallelSpec, split_pairs
from .parallel_files import write_parallel
from .progress import Reporter
from .sources import SOURCES
from .splits import CORPUS_FRACTIONS, TASK_FRACTIONS
from .task_builders import (
    BUILDERS,
    RULES,
    deduplicate,
    label_counts,
    split_items,
    task_salt,
    text_key,
)
from .task_files import read_examples, write_examples
from .tasks import TASKS, TaskSpec
from .text import word_count
from .tokenizer import DEFAULT_VOCAB_SIZE, count_tokens, save_tokenizer, train_wordpiece
from .translation_tokenizer import (
    DEFAULT_TRANSLATION_VOCAB,
    save_translation_tokenizer,
    train_shared_bpe,
)
from .xlingual import XLINGUAL_VERSION, XLINGUAL_VOCAB, read_handbook, write_xlingual, written_files

TASK_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


class MissingSources(RuntimeError):
    """Some sources could not be fetched, so the parts that need them were not built."""

    def __init__(self, failures: list[FetchError], not_built: list[str], layout: DataPaths):
        self.failures, self.not_built = failures, not_built
        super().__init__(missing_message(failures, not_built, layout))


def missing_message(failures: list[FetchError], not_built: list[str], layout: DataPaths) -> str:
    lines = [f"posattn could not fetch {len(failures)} source package(s):"]
    lines += [f"  {f.source.name} ({f.source.content}): {f.reason}" for f in failures]
    lines += [
        f"so these parts were not built: {', '.join(not_built)}.",
        f"Everything else is ready in {layout.root}. To build the rest, either",
        f"  - put the archives in {layout.downloads}/ yourself and run prepare again:",
    ]
    lines += [f"      {f.source.archive_pattern}  (`{f.source.fetch_command}`)" for f in failures]
    lines += [
        "  - or use your own data:",
        "      --corpus FILE      UTF-8 text, one paragraph per line (repeatable)",
        '      --task NAME=FILE   JSON Lines, one {"text": ..., "label": ...} per line, with',
        '                         "text_pair" in pair tasks (see `posattn data prepare --help`)',
    ]
    failed = {f.source.name for f in failures}
    buildable = [name for name, spec in TASKS.items() if not failed & set(spec.sources)]
    if buildable:
        lines.append(f"  - or build only what can be had: --tasks {','.join(buildable)}")
    return "\n".join(lines)


@dataclass
class Plan:
    """What to build, checked before anything is fetched."""

    tasks: list[str]  # built-in tasks built from their packages
    corpus_files: list[Path] = field(default_factory=list)
    task_files: dict[str, Path] = field(default_factory=dict)
    vocab_size: int = DEFAULT_VOCAB_SIZE
    translations: list[str] = field(default_factory=list)  # parallel sets (PARALLEL)
    translation_vocab_size: int = DEFAULT_TRANSLATION_VOCAB
    xlingual: list[str] = field(default_factory=list)  # handbook languages; none: no set
    builtin_corpus: str = DEFAULT_CORPUS  # a name in BUILTIN_CORPORA, unless corpus_files

    @property
    def corpus_sources(self) -> list[str]:
        return [] if self.corpus_files else list(BUILTIN_CORPORA[self.builtin_corpus])

    def sources(self) -> list[str]:
        needed = set(self.corpus_sources)
        for name in self.tasks:
            needed.update(TASKS[name].sources)
        for name in self.translations:
            needed.update(PARALLEL[name].sources)
        if self.xlingual:
            needed.add(XLINGUAL_SOURCE)
        return [name for name in SOURCES if name in needed]


def make_plan(
    tasks: Iterable[str] | None,
    corpus: Sequence[str | os.PathLike] | None,
    task_files: Mapping[str, str | os.PathLike] | None,
    vocab_size: int,
    translations: Iterable[str] | None = None,
    translation_vocab_size: int = DEFAULT_TRANSLATION_VOCAB,
    xlingual: Iterable[str] | None = None,
    builtin_corpus: str = DEFAULT_CORPUS,
) -> Plan:
    require_positive_int("vocab_size", vocab_size)
    require_positive_int("translation_vocab_size", translation_vocab_size)
    chosen = list(TASKS) if tasks is None else list(tasks)
    for name in chosen:
        require_choice("tasks", name, tuple(TASKS))
    parallel = list(translations or ())
    for name in parallel:
        require_choice("translation", name, tuple(PARALLEL))
    files = {}
    for name, path in (task_files or {}).items():
        require(bool(TASK_NAME.match(name)), "task", name, "a name of a-z, 0-9, _ and -")
        require(Path(path).is_file(), f"task {name}", str(path), "an existing JSON Lines file")
        files[name] = Path(path)
    for path in corpus or ():
        require(Path(path).is_file(), "corpus", str(path), "an existing UTF-8 text file")
    require_choice("builtin_corpus", builtin_corpus, tuple(BUILTIN_CORPORA))
    if corpus:
        require(
            builtin_corpus == DEFAULT_CORPUS,
            "builtin_corpus",
            builtin_corpus,
            f"{DEFAULT_CORPUS!r} (the default) when corpus files replace the built-in corpus",
        )
    languages = list(xlingual or ())
    if languages:
        require("en-US" in languages, "xlingual", languages, "a list with en-US (the labels)")
        require(len(set(languages)) == len(languages), "xlingual", languages, "no repeats")
    builtin = [name for name in chosen if name not in files]
    return Plan(
        builtin,
        [Path(p) for p in corpus or ()],
        files,
        vocab_size,
        parallel,
        translation_vocab_size,
        languages,
        builtin_corpus,
    )


def prepare(
    data_dir: str | os.PathLike | None = None,
    *,
    tasks: Iterable[str] | None = None,
    corpus: Sequence[str | os.PathLike] | None = None,
    task_files: Mapping[str, str | os.PathLike] | None = None,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    quiet: bool = False,
    translations: Iterable[str] | None = None,
    translation_vocab_size: int = DEFAULT_TRANSLATION_VOCAB,
    xlingual: Iterable[str] | None = None,
    builtin_corpus: str = DEFAULT_CORPUS,
) -> DataPaths:
    """Build the data directory (default: `default_data_dir()`).

    tasks: the built-in tasks to build (default: all of `TASKS`).
    corpus: the user's text files (one paragraph per line) instead of the built-in corpus.
    builtin_corpus: which built-in corpus (`BUILTIN_CORPORA`): "books" (novels, Bibles,
    WordNet glosses) or "news" (the BBC articles that every BBC task keeps for training).
    task_files: {name: JSON Lines file} for a user's task, or to replace a built-in one.
    vocab_size: WordPiece vocabulary size.
    translations: the parallel sets to build (names in `PARALLEL`; default none here, all of
    them from the command line), each with a shared BPE tokenizer of `translation_vocab_size`.
    xlingual: handbook languages (en-US among them) of the cross-lingual set (xlingual.py);
    default none here, xlingual.DEFAULT_LANGUAGES from the command line.
    Raises MissingSources when a source cannot be had, after building everything that does not
    need it.
    """
    plan = make_plan(
        tasks,
        corpus,
        task_files,
        vocab_size,
        translations,
        translation_vocab_size,
        xlingual,
        builtin_corpus,
    )
    layout = paths(data_dir)
    # A second prepare of the directory waits for the first, then reads its manifest.
    lock = DirectoryLock(layout.root, "posattn data prepare")
    console = Console(stderr=True, quiet=quiet)  # the notice as written: paths hold no markup
    with lock.wait(notice=lambda text: console.print(text, markup=False, highlight=False)):
        return build_steps(plan, layout, quiet)


def build_steps(plan: Plan, layout: DataPaths, quiet: bool) -> DataPaths:
    """`prepare`'s steps, each skipped when the manifest shows it current."""
    started = time.perf_counter()
    manifest = read_manifest(layout.manifest)
    not_built: list[str] = []
    with Reporter(quiet) as reporter:
        roots, failures = fetch_sources(plan.sources(), layout, manifest, reporter)
        if plan.corpus_files or all(name in roots for name in plan.corpus_sources):
            build_corpus(plan, layout, manifest, roots, reporter)
            write_manifest(layout.manifest, manifest)
            build_tokenizer(plan.vocab_size, layout, manifest, reporter)
        else:
            not_built += ["corpus", "tokenizer"]
        write_manifest(layout.manifest, manifest)
        for name in plan.tasks:
            if all(source in roots for source in TASKS[name].sources):
                build_task(TASKS[name], layout, manifest, reporter, roots=roots)
            else:
                not_built.append(name)
            write_manifest(layout.manifest, manifest)
        for name, path in plan.task_files.items():
            build_task(user_spec(name, path), layout, manifest, reporter, path=path)
            write_manifest(layout.manifest, manifest)
        for name in plan.translations:
            spec = PARALLEL[name]
            if all(source in roots for source in spec.sources):
                build_parallel(spec, plan.translation_vocab_size, layout, manifest, reporter, roots)
            else:
                not_built.append(f"translation {name}")
            write_manifest(layout.manifest, manifest)
        if plan.xlingual:
            if XLINGUAL_SOURCE in roots:
                build_xlingual(plan.xlingual, layout, manifest, reporter, roots)
            else:
                not_built.append("xlingual")
            write_manifest(layout.manifest, manifest)
    manifest["last_prepare_seconds"] = round(time.perf_counter() - started, 1)
    write_manifest(layout.manifest, manifest)
    if failures:
        raise MissingSources(failures, not_built, layout)
    return layout


def fetch_sources(
    names: list[str], layout: DataPaths, manifest: dict[str, Any], reporter: Reporter
) -> tuple[dict[str, Path], list[FetchError]]:
    roots, failures = {}, []
    records = manifest.setdefault("sources", {})
    for name in reporter.track(names, "fetching sources"):
        try:
            records[name] = fetch(SOURCES[name], layout)
            roots[name] = layout.unpacked(name)
        except FetchError as failure:
            failures.append(failure)
    return roots, failures


def read_user_text(path: Path) -> list[str]:
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        bad = raw[error.start : error.start + 4]
        raise invalid(f"corpus {path}:{line}", bad, "UTF-8 text") from None
    lines = text.splitlines()
    require(any(line.strip() for line in lines), "corpus", str(path), "a file that is not empty")
    return lines


def build_corpus(
    plan: Plan,
    layout: DataPaths,
    manifest: dict[str, Any],
    roots: dict[str, Path],
    reporter: Reporter,
) -> None:
    if plan.corpus_files:
        inputs = {str(p): sha256_file(p) for p in plan.corpus_files}
    else:
        inputs = {name: manifest["sources"][name]["sha256"] for name in plan.corpus_sources}
    rules = []
    if not plan.corpus_files and plan.builtin_corpus in CORPUS_RULES:
        rules = [plan.builtin_corpus, CORPUS_RULES[plan.builtin_corpus]]
    fp = fingerprint("corpus", inputs, CORPUS_FRACTIONS, corpus_sources.BOOK_BLOCK, *rules)
    if step_is_current(manifest, "corpus", fp, layout.root):
        reporter.log("corpus: up to date")
        return
    found, by_source = [], {}
    if plan.corpus_files:
        for path in reporter.track(plan.corpus_files, "reading corpus files"):
            paragraphs = corpus_sources.user_corpus(path, read_user_text(path))
            by_source[str(path)] = len(paragraphs)
            found += paragraphs
    else:
        readers = BUILTIN_CORPORA[plan.builtin_corpus]
        for name in reporter.track(list(readers), "reading corpus sources"):
            paragraphs = readers[name](roots[name])
            by_source[name] = len(paragraphs)
            found += paragraphs
    splits = corpus_sources.split_corpus(found)
    records = []
    for split in CORPUS_SPLITS:
        write_atomic(layout.corpus(split), "".join(p + "\n" for p in splits[split]))
        records.append(file_record(layout.corpus(split), layout.root))
    manifest["corpus"] = {
        "fingerprint": fp,
        "files": records,
        "builtin": None if plan.corpus_files else plan.builtin_corpus,
        "paragraphs_by_source": by_source,
        "paragraphs": {split: len(splits[split]) for split in CORPUS_SPLITS},
        "words": {split: sum(map(word_count, splits[split])) for split in CORPUS_SPLITS},
        "bytes": {split: layout.corpus(split).stat().st_size for split in CORPUS_SPLITS},
    }


def build_tokenizer(
    vocab_size: int, layout: DataPaths, manifest: dict[str, Any], reporter: Reporter
) -> None:
    train = manifest["corpus"]["files"][0]
    fp = fingerprint("tokenizer", train["sha256"], vocab_size)
    if step_is_current(manifest, "tokenizer", fp, layout.root):
        reporter.log("tokenizer: up to date")
        return
    with reporter.step(f"training a WordPiece tokenizer ({vocab_size} tokens)"):
        tokenizer = train_wordpiece([layout.corpus("train")], vocab_size)
        written = save_tokenizer(tokenizer, layout.tokenizer)
    tokens = {}
    with reporter.step("counting corpus tokens"):
        for split in CORPUS_SPLITS:
            with open(layout.corpus(split), encoding="utf-8") as lines:
                tokens[split] = count_tokens(tokenizer, (line.rstrip("\n") for line in lines))
    manifest["tokenizer"] = {
        "fingerprint": fp,
        "files": [file_record(path, layout.root) for path in written],
        "vocab_size": tokenizer.get_vocab_size(),
        "corpus_tokens": tokens,
    }


def read_user_task(
    name: str, path: Path, labels: tuple[str, ...] | None = None, pair: bool | None = None
) -> list[dict[str, Any]]:
    examples = read_examples(path, labels, pair, allow_split=True)
    require(bool(examples), f"task {name}", str(path), "a file with at least one example")
    return examples


def user_spec(name: str, path: Path) -> TaskSpec:
    """A built-in task's spec when `name` is one; else labels and pairing come from the file."""
    if name in TASKS:
        spec = TASKS[name]
        return TaskSpec(name, spec.labels, spec.pair, f"{spec.description}; from {path}")
    examples = read_user_task(name, path)
    labels = tuple(sorted({example["label"] for example in examples}))
    require(len(labels) >= 2, f"task {name}", str(path), "examples of at least two labels")
    return TaskSpec(name, labels, "text_pair" in examples[0], f"from {path}")


def build_task(
    spec: TaskSpec,
    layout: DataPaths,
    manifest: dict[str, Any],
    reporter: Reporter,
    roots: dict[str, Path] | None = None,
    path: Path | None = None,
) -> None:
    """A built-in task from its packages (`roots`), or any task from a user's file (`path`)."""
    if path is not None:
        inputs = {str(path): sha256_file(path)}
    else:
        inputs = {name: manifest["sources"][name]["sha256"] for name in spec.sources}
    rules = RULES.get(spec.name) if path is None else None
    fp = fingerprint("task", spec.to_json(), inputs, TASK_FRACTIONS, *([rules] if rules else []))
    steps = manifest.setdefault("tasks", {})
    if step_is_current(steps, spec.name, fp, layout.root):
        reporter.log(f"task {spec.name}: up to date")
        return
    with reporter.step(f"building task {spec.name}"):
        if path is not None:
            examples = read_user_task(spec.name, path, spec.labels, spec.pair)
            items = [(text_key(example), example) for example in examples]
        else:
            items = deduplicate(BUILDERS[spec.name](roots or {}))
        splits = split_items(items, salt=task_salt(spec.name))
        for split in SPLITS:
            write_examples(layout.task_split(spec.name, split), splits[split])
        write_atomic(layout.task_info(spec.name), json_text(spec.to_json()))
    files = [layout.task_info(spec.name)] + [layout.task_split(spec.name, s) for s in SPLITS]
    steps[spec.name] = {
        "fingerprint": fp,
        "files": [file_record(p, layout.root) for p in files],
        "from": str(path) if path is not None else list(spec.sources),
        "examples": {split: len(splits[split]) for split in SPLITS},
        "labels": label_counts(splits),
        **({"rules": rules} if rules else {}),
    }


def json_text(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def build_parallel(
    spec: ParallelSpec,
    vocab_size: int,
    layout: DataPaths,
    manifest: dict[str, Any],
    reporter: Reporter,
    roots: dict[str, Path],
) -> None:
    """A translation set: line-aligned split files and a BPE tokenizer trained on the training
    pairs of both languages."""
    inputs = {name: manifest["sources"][name]["sha256"] for name in spec.sources}
    fp = fingerprint(
        "parallel", PAIRS_VERSION, spec.to_json(), inputs, PARALLEL_FRACTIONS, vocab_size
    )
    steps = manifest.setdefault("translation", {})
    if step_is_current(steps, spec.name, fp, layout.root):
        reporter.log(f"translation {spec.name}: up to date")
        return
    folder = layout.translation_dir(spec.name)
    with reporter.step(f"building translation set {spec.name}"):
        splits, dropped = split_pairs(spec.name, PARALLEL_BUILDERS[spec.name](roots))
        files = []
        for split in SPLITS:
            source = folder / f"{split}.{spec.source_lang}"
            target = folder / f"{split}.{spec.target_lang}"
            write_parallel(source, target, splits[split])
            files += [source, target]
        texts = [text for pair in splits["train"] for text in pair]
        tokenizer = train_shared_bpe(texts, vocab_size)
        files += save_translation_tokenizer(tokenizer, folder / "tokenizer")
        info = {**spec.to_json(), "pairs": {s: len(splits[s]) for s in SPLITS}}
        write_atomic(folder / "pairs.json", json_text({**info, "dropped": dropped}))
        files.append(folder / "pairs.json")
    steps[spec.name] = {
        "fingerprint": fp,
        "files": [file_record(p, layout.root) for p in files],
        "pairs": {split: len(splits[split]) for split in SPLITS},
        "dropped": dropped,
        "words": {
            lang: sum(len(pair[side].split()) for s in SPLITS for pair in splits[s])
            for side, lang in enumerate((spec.source_lang, spec.target_lang))
        },
        "vocab_size": len(tokenizer),
    }


XLINGUAL_SOURCE = "debian-handbook"


def build_xlingual(
    languages: list[str],
    layout: DataPaths,
    manifest: dict[str, Any],
    reporter: Reporter,
    roots: dict[str, Path],
) -> None:
    """The cross-lingual set (xlingual.py) from the handbook's pages in `languages`."""
    inputs = manifest["sources"][XLINGUAL_SOURCE]["sha256"]
    fp = fingerprint("xlingual", XLINGUAL_VERSION, inputs, languages, XLINGUAL_VOCAB)
    if step_is_current(manifest, "xlingual", fp, layout.root):
        reporter.log("xlingual: up to date")
        return
    with reporter.step(f"building the cross-lingual set ({len(languages)} languages)"):
        book = read_handbook(roots[XLINGUAL_SOURCE], languages)
        info = write_xlingual(book, layout.xlingual_dir, XLINGUAL_VOCAB)
    manifest["xlingual"] = {
        "fingerprint": fp,
        "files": [file_record(p, layout.root) for p in written_files(layout.xlingual_dir)],
        **{key: info[key] for key in ("languages", "blocks_kept", "blocks_dropped", "examples")},
    }
