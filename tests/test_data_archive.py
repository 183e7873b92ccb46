"""`posattn data pack` / `unpack`: a prepared directory carried to a machine without network
arrives whole (same bytes, same loaders' output), without the downloaded sources, and damaged
or hostile archives are refused before anything is written."""

from __future__ import annotations

import argparse
import io
import json
import tarfile
import threading

import pytest

from posattn import PosAttnConfigError
from posattn.cli import entry
from posattn.data import load_task, load_tokenizer, prepare
from posattn.data.archive import built_files, pack, unpack
from posattn.data.commands import register
from posattn.data.manifest import read_manifest

LINES = [f"the ship {i} sailed at dawn with a fair wind number {i % 7}" for i in range(400)]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("prepared")
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    rows = [json.dumps({"text": f"good {i}", "label": "positive"}) for i in range(20)]
    rows += [json.dumps({"text": f"bad {i}", "label": "negative"}) for i in range(20)]
    task = root / "sentiment.jsonl"
    task.write_text("\n".join(rows) + "\n", encoding="utf-8")
    data = root / "data"
    prepare(
        data, tasks=[], corpus=[corpus], task_files={"sentiment": task}, vocab_size=120, quiet=True
    )
    # A downloaded source that must not travel.
    (data / "sources" / "downloads").mkdir(parents=True)
    (data / "sources" / "downloads" / "package.deb").write_bytes(b"\x00" * 64)
    return data


def run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["data", *argv])
    return args.func(args)


def test_round_trip_keeps_every_built_file_and_no_source(prepared, tmp_path):
    archive = tmp_path / "data.tar.xz"
    assert run_cli("pack", str(archive), "--data-dir", str(prepared)) == 0
    with tarfile.open(archive) as opened:
        names = set(opened.getnames())
    manifest = json.loads((prepared / "manifest.json").read_text())
    expected = {r["path"] for r in built_files(manifest)} | {"manifest.json"}
    assert names == expected
    assert "corpus/train.txt" in names and "tokenizer/tokenizer.json" in names
    assert not any(name.startswith("sources") for name in names)

    target = tmp_path / "elsewhere"
    assert run_cli("unpack", str(archive), "--data-dir", str(target)) == 0
    for name in expected:
        assert (target / name).read_bytes() == (prepared / name).read_bytes(), name
    assert not list(target.glob(".unpack-*"))  # the staging directory is gone
    assert load_task(target, "sentiment", "train") == load_task(prepared, "sentiment", "train")
    text = LINES[3]
    assert load_tokenizer(target)(text)["input_ids"] == load_tokenizer(prepared)(text)["input_ids"]


def test_packs_of_one_archive_at_once_each_write_it_whole(prepared, tmp_path):
    """Two packs to one output at once each go through a partial file of their own (under one
    fixed name, one renamed the other's away and failed), and the archive left is whole."""
    archive, failures = tmp_path / "data.tar.xz", []

    def pack_into() -> None:
        try:
            pack(prepared, archive)
        except OSError as error:
            failures.append(error)

    threads = [threading.Thread(target=pack_into) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert [p.name for p in tmp_path.iterdir()] == ["data.tar.xz"]
    with tarfile.open(archive) as opened:
        names = set(opened.getnames())
    assert names == {r["path"] for r in built_files(read_manifest(prepared / "manifest.json"))} | {
        "manifest.json"
    }


def test_a_pack_that_fails_leaves_the_old_archive_and_no_partial_one(
    prepared, tmp_path, monkeypatch
):
    archive = tmp_path / "data.tar.xz"
    pack(prepared, archive)
    before = archive.read_bytes()

    def fail(self, *args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(tarfile.TarFile, "add", fail)
    with pytest.raises(OSError, match="disk full"):
        pack(prepared, archive)
    assert archive.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["data.tar.xz"]


def test_pack_refuses_an_unprepared_or_altered_directory(prepared, tmp_path):
    with pytest.raises(PosAttnConfigError, match=r"--data-dir=.*holds no prepared data"):
        pack(tmp_path / "empty", tmp_path / "a.tar.xz")
    copy = tmp_path / "copy"
    unpack(pack_to(prepared, tmp_path), copy)
    with open(copy / "corpus" / "validation.txt", "a", encoding="utf-8") as handle:
        handle.write("one more line\n")
    with pytest.raises(PosAttnConfigError, match=r"1 built file.*corpus/validation.txt"):
        pack(copy, tmp_path / "b.tar.xz")
    assert not (tmp_path / "b.tar.xz").exists()


def pack_to(prepared, directory):
    archive = directory / "packed.tar.xz"
    if not archive.exists():
        pack(prepared, archive)
    return archive


def tampered_archive(prepared, path, members: dict[str, bytes]):
    """The packed archive with `members` replacing or adding files."""
    with tarfile.open(pack_to(prepared, path.parent)) as original:
        kept = [(m, original.extractfile(m).read()) for m in original.getmembers() if m.isfile()]
    with tarfile.open(path, "w:xz") as archive:
        for member, payload in kept:
            payload = members.pop(member.name, payload)
            member.size = len(payload)
            archive.addfile(member, io.BytesIO(payload))
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            archive.addfile(info, io.BytesIO(payload))
    return path


def test_unpack_refuses_a_damaged_archive_and_writes_nothing(prepared, tmp_path):
    bad = tampered_archive(prepared, tmp_path / "bad.tar.xz", {"corpus/train.txt": b"changed\n"})
    target = tmp_path / "target"
    with pytest.raises(PosAttnConfigError, match=r"corpus/train.txt\); nothing was written"):
        unpack(bad, target)
    assert list(target.iterdir()) == []


def test_unpack_refuses_paths_outside_the_directory(prepared, tmp_path):
    hostile = tampered_archive(prepared, tmp_path / "hostile.tar.xz", {"../escape.txt": b"x"})
    with pytest.raises(PosAttnConfigError, match="not a readable `posattn data pack` archive"):
        unpack(hostile, tmp_path / "target")
    assert not (tmp_path / "escape.txt").exists()


def test_unpack_refuses_a_prepared_directory_and_a_missing_archive(prepared, tmp_path, capsys):
    with pytest.raises(PosAttnConfigError, match="already holds prepared data"):
        unpack(pack_to(prepared, tmp_path), prepared)
    with pytest.raises(PosAttnConfigError, match=r"ARCHIVE=.*nothing.tar.xz' is not a file"):
        unpack(tmp_path / "nothing.tar.xz", tmp_path / "t")
    not_ours = tmp_path / "plain.tar.xz"
    with tarfile.open(not_ours, "w:xz") as archive:
        info = tarfile.TarInfo("readme.txt")
        archive.addfile(info, io.BytesIO(b""))
    with pytest.raises(PosAttnConfigError, match=r"holds no manifest\.json with built files"):
        unpack(not_ours, tmp_path / "t2")
    # The command line: one error line naming ARCHIVE, exit status 2.
    assert entry(["data", "unpack", str(not_ours), "--data-dir", str(tmp_path / "t3")]) == 2
    assert "posattn: error: ARCHIVE=" in capsys.readouterr().err
