"""The digests of prepared data folders a stage reads (posattn/data/identity.py): a rerun on
rebuilt data is refused like a rerun with other settings, naming the folder that changed, and
a report says which data it read."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings

import pytest

from posattn import PosAttnConfigError
from posattn.cli import main
from posattn.data.identity import MISSING, DataFolders, english_folders, folder_digest
from posattn.lab.runs import stages
from posattn.lab.runs.fingerprint import run_settings
from posattn.lab.runs.stages import FINISHED, FRESH, Stage, stage_state, start_stage


@pytest.fixture(autouse=True)
def float32(float32_default):
    yield


def digest_by_definition(folder) -> str:
    """sha256 over sorted 'relative path NUL sha256 of the file' lines, hidden files left out."""
    files = [path for path in folder.rglob("*") if path.is_file()]
    names = {path: path.relative_to(folder) for path in files}
    lines = sorted(
        f"{names[path].as_posix()}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n"
        for path in files
        if not any(part.startswith(".") for part in names[path].parts)
    )
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def test_a_folder_digest_is_its_files_names_and_contents_wherever_it_lies(tmp_path):
    folder = tmp_path / "a" / "tasks" / "toy"
    (folder / "sub").mkdir(parents=True)
    (folder / "train.jsonl").write_text('{"text": "x", "label": 0}\n')
    (folder / "sub" / "task.json").write_text('{"name": "toy"}\n')
    first = folder_digest(folder)
    assert first == digest_by_definition(folder)
    moved = tmp_path / "b"
    shutil.copytree(folder, moved)
    assert folder_digest(moved) == first  # the path of the data directory is not in it
    (folder / ".train.jsonl.123-4.partial").write_text("half a write")
    assert folder_digest(folder) == first  # a write under way is not the data
    (folder / "train.jsonl").write_text('{"text": "y", "label": 0}\n')  # one byte
    changed = folder_digest(folder)
    assert changed != first and changed == digest_by_definition(folder)
    (folder / "train.jsonl").rename(folder / "dev.jsonl")  # same bytes, another file
    assert folder_digest(folder) not in (first, changed)
    assert folder_digest(tmp_path / "nothing") == MISSING


def stage_on(data_root, directory, steps=10) -> Stage:
    folders = english_folders(data_root, ["sentiment"])
    return Stage(directory, run_settings(train={"steps": steps}), "metrics.json", folders)


def test_a_stage_on_changed_data_is_refused_naming_the_folder(tiny_data_dir, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(tiny_data_dir, data)
    stage = stage_on(data, tmp_path / "stage")
    assert stage_state(stage) == FRESH
    start_stage(stage)
    recorded = stage.record()["data"]
    assert recorded == {
        "corpus": digest_by_definition(data / "corpus"),
        "tokenizer": digest_by_definition(data / "tokenizer"),
        "tasks/sentiment": digest_by_definition(data / "tasks" / "sentiment"),
    }
    (stage.directory / "metrics.json").write_text("{}")
    assert stage_state(stage) == FINISHED
    # another task's folder is not read by this stage: changing it changes nothing
    with open(data / "tasks" / "paraphrase" / "train.jsonl", "a") as handle:
        handle.write('{"text": "one more", "label": 0}\n')
    assert stage_state(stage) == FINISHED
    with open(data / "tasks" / "sentiment" / "train.jsonl", "a") as handle:
        handle.write('{"text": "one more", "label": 0}\n')
    old, new = recorded["tasks/sentiment"][:12], folder_digest(data / "tasks" / "sentiment")[:12]
    expected = rf'data\.tasks/sentiment: "{old}" -> "{new}" \(the prepared data was rebuilt'
    with pytest.raises(PosAttnConfigError, match=expected) as error:
        stage_state(stage)
    assert "corpus" not in str(error.value) and "--overwrite" in str(error.value)
    (stage.directory / "checkpoints" / "checkpoint-5").mkdir(parents=True)
    with pytest.raises(PosAttnConfigError, match=r"data\.tasks/sentiment"):
        start_stage(stage, resume=True)  # a killed stage is not resumed on other data
    # settings and data both changed: both named
    with pytest.raises(PosAttnConfigError, match=r"train\.steps: 10 -> 20; data\.tasks"):
        stage_state(stage_on(data, stage.directory, steps=20))
    assert stage_state(stage, overwrite=True) == FRESH and not stage.directory.exists()


def test_a_stage_recorded_before_digests_is_reused_on_its_settings_with_a_warning(
    tiny_data_dir, tmp_path, monkeypatch
):
    monkeypatch.setattr(stages, "_warned_undigested", [])
    stage = stage_on(tiny_data_dir, tmp_path / "old")
    stage.directory.mkdir()
    record = {"fingerprint": stage.fingerprint, "settings": stage.settings}  # no "data"
    (stage.directory / "stage.json").write_text(json.dumps(record))
    (stage.directory / "metrics.json").write_text("{}")
    with pytest.warns(UserWarning, match=r"records no data digests.*settings alone"):
        assert stage_state(stage) == FINISHED
    other = stage_on(tiny_data_dir, tmp_path / "older")
    shutil.copytree(stage.directory, other.directory)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning per process, not one per old stage
        assert stage_state(other) == FINISHED
    # a stage that reads no data directory is matched on its settings alone, silently
    bare = Stage(stage.directory, stage.settings, "metrics.json")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert stage_state(bare) == FINISHED
    assert DataFolders(tiny_data_dir, ()).digests() == {}


def test_a_stage_recorded_before_digests_is_refused_where_its_data_was_written_after_it(
    tiny_data_dir, tmp_path, monkeypatch
):
    monkeypatch.setattr(stages, "_warned_undigested", [])
    data = tmp_path / "data"
    shutil.copytree(tiny_data_dir, data)
    stage = stage_on(data, tmp_path / "old")
    stage.directory.mkdir()
    record = {"fingerprint": stage.fingerprint, "settings": stage.settings}
    (stage.directory / "stage.json").write_text(json.dumps(record))
    (stage.directory / "metrics.json").write_text("{}")
    written = (stage.directory / "stage.json").stat().st_mtime
    os.utime(data / "tasks" / "paraphrase" / "dev.jsonl", (written + 60, written + 60))
    with pytest.warns(UserWarning, match="records no data digests"):
        assert stage_state(stage) == FINISHED  # a folder it does not read
    os.utime(data / "corpus" / "train.txt", (written + 60, written + 60))  # prepared again
    with pytest.raises(PosAttnConfigError, match=r"data: prepared again after this stage\.json"):
        stage_state(stage)
    assert "_written" not in json.loads((stage.directory / "stage.json").read_text())


def test_compare_refuses_only_the_cells_whose_data_changed(tiny_data_dir, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(tiny_data_dir, data)
    output = tmp_path / "compare"
    args = ["compare", "--preset", "smoke", "--data-dir", str(data), "--output", str(output),
            "--encodings", "learned", "finetune.tasks=[sentiment]",
            "finetune.seeds=[0]"]  # fmt: skip
    assert main(args) == 0
    summary = json.loads((output / "results.json").read_text())
    digests = english_folders(data, ["sentiment"]).digests()
    assert summary["context"]["data"] == digests
    line = f"corpus {digests['corpus'][:12]}, tokenizer {digests['tokenizer'][:12]}, "
    assert line in (output / "results.md").read_text()
    pretraining = output / "learned" / "seed0" / "pretrain" / "metrics.json"
    tuning = output / "learned" / "seed0" / "finetune" / "sentiment" / "finetune.json"
    stamps = pretraining.stat().st_mtime_ns, tuning.stat().st_mtime_ns
    rows = (data / "tasks" / "sentiment" / "train.jsonl").read_text().splitlines()
    (data / "tasks" / "sentiment" / "train.jsonl").write_text("\n".join(rows[1:]) + "\n")
    refused = r"finetune/sentiment holds.*data\.tasks/sentiment"
    with pytest.raises(PosAttnConfigError, match=refused):
        main(args)
    assert main([*args, "--overwrite"]) == 0  # the fine-tuning again, on the pretraining kept
    assert pretraining.stat().st_mtime_ns == stamps[0]
    assert tuning.stat().st_mtime_ns != stamps[1]
    context = json.loads((output / "results.json").read_text())["context"]
    assert context["cells"] == {"total": 2, "reused": 1}
    assert context["data"]["tasks/sentiment"] == folder_digest(data / "tasks" / "sentiment")
