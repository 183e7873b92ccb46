"""The cross-lingual set and `compare --task xlingual` on a generated handbook: alignment and
untranslated blocks, splits by page, task labels read back from the block ids, and a comparison
that writes every output and reuses its finished cells."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import pytest
from conftest import counted_fine_tunings

from posattn import PosAttnConfig, PosAttnConfigError
from posattn.cli import main
from posattn.data.build import make_plan
from posattn.data.handbook import HTML_DIR
from posattn.data.identity import folder_digest
from posattn.data.multilingual import MIN_SCRIPT_SHARE, page_splits, translated_blocks, untranslated
from posattn.data.xlingual import XlingualData, read_handbook
from posattn.lab.pretraining.arms import arm_config, check_arms
from posattn.lab.pretraining.xlingual import PRESETS as XLINGUAL_PRESETS
from posattn.lab.pretraining.xlingual import load_xlingual_config
from tests.xlingual_fixtures import (
    BLOCKS_PER_PAGE,
    CHAPTERS,
    IDENTICAL,
    LATIN_IN_RUSSIAN,
    MISMATCHED_PAGE,
    MOSTLY_ENGLISH,
    build_xlingual_data,
    generated_handbook,
)

LANGUAGES = ("en-US", "de-DE", "ru-RU")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return build_xlingual_data(tmp_path_factory.mktemp("xlingual-data"))


@pytest.fixture(autouse=True)
def float32(float32_default):
    yield


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def test_untranslated_rules_each_on_a_constructed_block():
    english = "Install the package with apt and restart the server now"
    assert untranslated(
        english, "Install  the package with apt and restart the server now", "de-DE"
    )
    # seven of eight words English: left in English with one word changed
    assert untranslated(english, "Install the Paket with apt and restart the server", "de-DE")
    assert not untranslated(
        english, "Installieren Sie das Paket mit apt und starten Sie neu", "de-DE"
    )
    russian = "Установите пакет с помощью apt и перезапустите сервер"
    assert not untranslated(english, russian, "ru-RU")
    # a Latin-script "translation" in Russian: no Cyrillic letter at all
    assert untranslated(english, "Installieren Sie das Paket mit apt und starten", "ru-RU")
    # the script rule counts letters: 1 Cyrillic letter of 20 is under the floor
    mixed = "Installieren Sie das д"
    assert sum(c.isalpha() for c in mixed) * MIN_SCRIPT_SHARE > 1
    assert untranslated(english, mixed, "ru-RU")


def test_alignment_keeps_translated_blocks_and_skips_mismatched_pages():
    book = generated_handbook()
    pages = len(book.chapters)
    assert len(translated_blocks(book, "en-US")) == pages * BLOCKS_PER_PAGE
    german = translated_blocks(book, "de-DE")
    assert all(page != MISMATCHED_PAGE for page, _ in german)
    assert {index for _, index in german} == set(range(BLOCKS_PER_PAGE)) - {
        IDENTICAL,
        MOSTLY_ENGLISH,
    }
    assert len(german) == (pages - 1) * (BLOCKS_PER_PAGE - 2)
    russian = translated_blocks(book, "ru-RU")
    assert {index for _, index in russian} == set(range(BLOCKS_PER_PAGE)) - {LATIN_IN_RUSSIAN}
    # aligned by position: the kept block is the page's block of that index
    for (page, index), text in german.items():
        assert text == book.blocks["de-DE"][page][index]


def test_every_chapter_of_five_pages_has_train_and_test_pages():
    splits = page_splits(generated_handbook().chapters)
    for chapter, count in CHAPTERS.items():
        own = [s for p, s in splits.items() if p == chapter or p.startswith(f"sect.{chapter}-")]
        assert len(own) == count
        if count >= 5:
            assert {"train", "test"} <= set(own)
    assert splits == page_splits(dict(reversed(list(generated_handbook().chapters.items()))))


def test_no_test_page_reaches_training_in_any_language(data_dir):
    book = generated_handbook()
    info = json.loads((data_dir / "xlingual" / "info.json").read_text())
    splits = info["page_splits"]
    where = {}  # every block text of every language -> its page
    for language in LANGUAGES:
        for page, blocks in book.blocks[language].items():
            for text in blocks:
                where.setdefault(text, set()).add(page)
    corpus = data_dir / "xlingual" / "corpus"
    for split, allowed in (("train", {"train"}), ("validation", {"dev"})):
        lines = (corpus / f"{split}.txt").read_text("utf-8").splitlines()
        assert lines and all({splits[p] for p in where[line]} == allowed for line in lines)
    test_pages = {p for p, s in splits.items() if s == "test"}
    assert test_pages
    tasks = data_dir / "xlingual" / "tasks"
    for task in ("next-block", "chapter"):
        for file in sorted((tasks / task).glob("*.jsonl")):
            split = "test" if file.name.startswith("test.") else file.stem
            for row in read_rows(file):
                pages = {block.rsplit("/", 1)[0] for block in row["id"].split()}
                assert {splits[p] for p in pages} == {split}, (file.name, row["id"])


def test_untranslated_blocks_are_in_no_file(data_dir):
    book = generated_handbook()
    dropped = {
        book.blocks["de-DE"][page][i]
        for page in book.blocks["de-DE"]
        for i in (IDENTICAL, MOSTLY_ENGLISH)
    } | {book.blocks["ru-RU"][page][LATIN_IN_RUSSIAN] for page in book.blocks["ru-RU"]}
    english = {text for blocks in book.blocks["en-US"].values() for text in blocks}
    dropped -= english  # a block identical to English is kept once, as English
    folder = data_dir / "xlingual"
    texts = set()
    for file in folder.rglob("*.txt"):
        texts |= set(file.read_text("utf-8").splitlines())
    for file in (folder / "tasks").rglob("test.*.jsonl"):
        language = file.name.split(".")[1]
        for row in read_rows(file):
            assert (row["text"] in english) == (language == "en-US")
            texts |= {row["text"], row.get("text_pair", "")}
    assert dropped and not dropped & texts


def test_task_labels_read_back_from_the_block_ids(data_dir):
    book = generated_handbook()
    data = XlingualData(data_dir)
    assert data.languages == list(LANGUAGES)
    assert data.spec("chapter").labels == ("alpha", "beta")  # gamma has too few pages
    for language in LANGUAGES:
        rows = read_rows(data.folder / "tasks" / "next-block" / f"test.{language}.jsonl")
        assert {r["label"] for r in rows} == {"follows", "elsewhere"}
        for row in rows:
            (page_a, a), (page_b, b) = (key.rsplit("/", 1) for key in row["id"].split())
            follows = page_a == page_b and int(b) == int(a) + 1
            assert row["label"] == ("follows" if follows else "elsewhere")
            assert page_a != page_b or follows  # a negative comes from another page
            assert row["text"] == book.blocks[language][page_a][int(a)]
            assert row["text_pair"] == book.blocks[language][page_b][int(b)]
        for row in read_rows(data.folder / "tasks" / "chapter" / f"test.{language}.jsonl"):
            page, index = row["id"].rsplit("/", 1)
            assert row["label"] == book.chapters[page]
            assert row["text"] == book.blocks[language][page][int(index)]
    # records() gives label indices; training and dev are English only (zero-shot)
    records = data.records("chapter", "train")
    assert records and {r["label"] for r in records} <= {0, 1}
    with pytest.raises(PosAttnConfigError, match="zero-shot"):
        data.records("chapter", "train", "de-DE")
    english_ids = {r["id"] for r in data.records("next-block", "test")}
    assert {r["id"] for r in data.records("next-block", "test", "de-DE")} <= english_ids


def test_compare_xlingual_writes_every_output_and_reuses_its_cells(data_dir, tmp_path):
    output = tmp_path / "xlingual"
    args = ["compare", "--task", "xlingual", "--preset", "smoke", "--data-dir", str(data_dir),
            "--output", str(output), "--encodings", "learned,diet-abs,none",
            "finetune.max_eval_examples=null"]  # fmt: skip
    assert main(args) == 0
    summary = json.loads((output / "results.json").read_text())
    assert summary["context"]["languages"] == list(LANGUAGES)
    # every stage read the one cross-lingual folder, and the report names its digest
    digest = folder_digest(data_dir / "xlingual")
    assert summary["context"]["data"] == {"xlingual": digest}
    for cell in ("pretrain", "finetune/chapter"):
        stage = json.loads((output / "none" / "seed0" / cell / "stage.json").read_text())
        assert stage["data"] == {"xlingual": digest}
    assert f"first digits): xlingual {digest[:12]}." in (output / "results.md").read_text()
    for task in ("next-block", "chapter"):
        for arm in ("learned", "diet-abs"):
            tuned = json.loads(
                (output / arm / "seed0" / "finetune" / task / "xlingual.json").read_text()
            )[task]
            run = tuned["runs"][str(tuned["learning_rate"])][0]
            test_file = data_dir / "xlingual" / "tasks" / task
            for language in LANGUAGES:
                correct = run["test_correct"][language]
                assert len(correct) == len(read_rows(test_file / f"test.{language}.jsonl"))
                assert sum(correct) / len(correct) == pytest.approx(run["test"][language])
                assert -1 <= run["test_matthews"][language] <= 1
                assert 0 <= run["test_f1_macro"][language] <= 1
                cell = summary["downstream"][f"{task}/{language}"][arm]
                assert cell["mean"] == pytest.approx(100 * run["test"][language])
            transfer = summary["transfer"][task][arm]
            zero_shot = (run["test"]["de-DE"] + run["test"]["ru-RU"]) * 50
            assert transfer["zero_shot"]["mean"] == pytest.approx(zero_shot)
            assert transfer["gap"]["mean"] == pytest.approx(100 * run["test"]["en-US"] - zero_shot)
        paired = summary["paired_with_learned"]["diet-abs"][task]["zero_shot"]
        means = [
            summary["transfer"][task][arm]["zero_shot"]["mean"] for arm in ("diet-abs", "learned")
        ]
        assert paired["difference"] == pytest.approx(means[0] - means[1])
        # every arm against the model without positions, the control, the same way
        for language_set in ("zero_shot", "english"):
            control = summary["paired_with_none"]["learned"][task][language_set]["difference"]
            against = summary["paired_with_learned"]["none"][task][language_set]["difference"]
            assert control == pytest.approx(-against)
    # the MLM losses paired by seed too: one seed, the difference of the two final losses
    losses = [
        summary["results"][arm]["pretrain"]["0"]["final_eval_loss"] for arm in ("diet-abs", "none")
    ]
    paired_loss = summary["paired_with_none"]["diet-abs"]["mlm_loss"]
    assert paired_loss["difference"] == pytest.approx(losses[0] - losses[1])
    assert paired_loss["runs"] == 1 and paired_loss["interval"] is None
    claims = {c["id"]: c for c in summary["claims"]}
    assert claims["xnli-shaw>learned"]["verdict"] == "inconclusive"
    assert claims["xnli-diet-abs>learned"]["values"]["b"] == "learned"
    # over both tasks the pairing is the claim's own comparison: the same difference and
    # interval, and the average of the two tasks' differences (each over the same runs)
    everything = summary["paired_with_learned"]["diet-abs"]["all_tasks"]["zero_shot"]
    claim = claims["xnli-diet-abs>learned"]["values"]["difference"]
    assert everything["difference"] == pytest.approx(claim["difference"])
    assert everything["interval"] == pytest.approx(claim["interval"])
    per_task = summary["paired_with_learned"]["diet-abs"]
    halves = [per_task[t]["zero_shot"]["difference"] for t in ("next-block", "chapter")]
    assert everything["difference"] == pytest.approx(sum(halves) / 2)
    table = (output / "results.md").read_text()
    assert "| `diet-abs` |" in table and "## next-block" in table and "majority" in table
    assert "| arm - `none` | MLM val loss | next-block zero-shot |" in table
    assert "all tasks zero-shot | all tasks English |" in table
    assert (output / "xlingual.png").stat().st_size > 1000
    assert (output / "validation_loss.png").stat().st_size > 1000
    marker = output / "learned" / "seed0" / "finetune" / "chapter" / "xlingual.json"
    model = output / "learned" / "seed0" / "pretrain" / "model" / "model.safetensors"
    stamps = [marker.stat().st_mtime_ns, model.stat().st_mtime_ns]
    assert main(args) == 0  # the same settings: every cell is read back, nothing trains
    assert [marker.stat().st_mtime_ns, model.stat().st_mtime_ns] == stamps
    cells = json.loads((output / "results.json").read_text())["context"]["cells"]
    assert cells == {"total": 9, "reused": 9}  # 3 arms x (pretraining + 2 tasks)
    assert "0 of 9 cells this invocation computed" in (output / "results.md").read_text()
    # compare.paired_with only re-summarises: nothing trains, and diet-abs's pairing with
    # learned comes back turned round
    assert main([*args, "compare.paired_with=[diet-abs]"]) == 0
    assert [marker.stat().st_mtime_ns, model.stat().st_mtime_ns] == stamps
    again = json.loads((output / "results.json").read_text())
    for task in ("next-block", "chapter", "all_tasks"):
        for language_set in ("zero_shot", "english"):
            turned = again["paired_with_arms"]["diet-abs"]["learned"][task][language_set]
            paired = summary["paired_with_learned"]["diet-abs"][task][language_set]
            assert turned["difference"] == pytest.approx(-paired["difference"])
    assert (
        "| arm - `diet-abs` | MLM val loss | next-block zero-shot |"
        in (output / "results.md").read_text()
    )
    with pytest.raises(PosAttnConfigError, match=r"compare\.paired_with.*'tupe-r'.*learned"):
        main([*args, "compare.paired_with=[tupe-r]"])
    with pytest.raises(PosAttnConfigError, match=r"finetune\.epochs: 1 -> 2"):
        main([*args, "finetune.epochs=2"])
    assert main(["report", str(output)]) == 0
    assert 'src="xlingual.png"' in (output / "report.html").read_text()


def test_a_cell_given_more_seeds_or_killed_computes_only_the_runs_it_lacks(
    data_dir, tmp_path, monkeypatch
):
    from posattn.lab.pretraining import xlingual as xlingual_module

    computed = counted_fine_tunings(monkeypatch, xlingual_module)
    output = tmp_path / "xlingual"
    base = ["compare", "--task", "xlingual", "--preset", "smoke", "--data-dir", str(data_dir),
            "--output", str(output), "--encodings", "learned",
            "finetune.tasks=[chapter]"]  # fmt: skip
    assert main([*base, "finetune.seeds=[0]"]) == 0
    cell = output / "learned" / "seed0"
    weights = cell / "pretrain" / "model" / "model.safetensors"
    trained = weights.stat().st_mtime_ns
    marker = cell / "finetune" / "chapter" / "xlingual.json"
    first = json.loads(marker.read_text())["chapter"]["runs"]["0.001"][0]
    assert computed == [(1e-3, 0)]

    assert main([*base, "finetune.seeds=[0,1]"]) == 0
    assert computed == [(1e-3, 0), (1e-3, 1)]  # seed 0 read back, not trained again
    assert weights.stat().st_mtime_ns == trained
    runs = json.loads(marker.read_text())["chapter"]["runs"]["0.001"]
    assert runs[0] == first and len(runs) == 2
    stage = json.loads((marker.parent / "stage.json").read_text())
    assert stage["settings"]["finetune"]["seeds"] == [0, 1]

    # killed before its result was written: the runs it finished are kept
    marker.unlink()
    assert main([*base, "finetune.seeds=[0,1]"]) == 0
    assert computed == [(1e-3, 0), (1e-3, 1)]
    assert json.loads(marker.read_text())["chapter"]["runs"]["0.001"] == runs
    # a run kept under other settings is not taken for one of these
    with pytest.raises(PosAttnConfigError, match=r"finetune\.epochs: 1 -> 2"):
        main([*base, "finetune.seeds=[0,1]", "finetune.epochs=2"])
    assert main([*base, "finetune.seeds=[0,1]", "finetune.epochs=2", "--overwrite"]) == 0
    assert computed[2:] == [(1e-3, 0), (1e-3, 1)]


def test_preparing_the_set_again_writes_every_file_the_same(data_dir, tmp_path):
    """The tokenizer included: its trainer alone drew one of several vocabularies per run."""
    again = build_xlingual_data(tmp_path / "again")
    assert folder_digest(again / "xlingual") == folder_digest(data_dir / "xlingual")


def test_the_multilingual_tokenizer_keeps_accents_and_kana(data_dir):
    tokenizer = XlingualData(data_dir).tokenizer()
    normalise = tokenizer.backend_tokenizer.normalizer.normalize_str
    assert normalise("Über パッケージ Gestión") == "über パッケージ gestión"


@pytest.mark.parametrize(
    ("languages", "fragment"),
    [(["de-DE", "fr-FR"], "with en-US"), (["en-US", "en-US"], "no repeats")],
)
def test_a_cross_lingual_set_needs_english_once(languages, fragment):
    with pytest.raises(PosAttnConfigError, match=fragment):
        make_plan([], None, None, 100, xlingual=languages)


def test_an_unknown_handbook_language_is_refused_by_name(tmp_path):
    html = tmp_path / HTML_DIR
    for language in ("en-US", "de-DE"):
        (html / language).mkdir(parents=True)
    with pytest.raises(PosAttnConfigError, match="xx-XX") as error:
        read_handbook(tmp_path, ["en-US", "xx-XX"])
    assert "de-DE" in str(error.value)


@pytest.mark.parametrize("preset", XLINGUAL_PRESETS)
def test_every_xlingual_preset_arm_builds_a_model_on_the_xlingual_tasks(preset):
    config = load_xlingual_config(preset)
    assert config.finetune.tasks == ["next-block", "chapter"]
    check_arms(config.encodings)
    for arm in config.encodings:
        PosAttnConfig(vocab_size=100, **asdict(arm_config(config, arm).model))
    with pytest.raises(PosAttnConfigError, match="one of 'smoke', 'quick'"):
        load_xlingual_config("standard")


def test_the_linformer_claim_reads_zero_shot_diet_abs_lin_against_linformer():
    """DIET Table 3's Linformer rows: the mean over target languages and tasks, paired by
    pretrained model; a run with full attention only names the arms it needs."""
    from posattn.lab.pretraining.xlingual_summary import xlingual_claims
    from posattn.lab.runs.claims import Measurements, evaluate_claims

    def runs(scores):
        return [{"seed": i, "score": s, "per_example": None} for i, s in enumerate(scores)]

    scores = {
        "chapter/de-DE": {"diet-abs-lin": [30.0, 32.0, 31.0], "linformer": [29.0, 30.0, 30.0]},
        "chapter/ru-RU": {"diet-abs-lin": [28.0, 30.0, 29.0], "linformer": [27.0, 29.0, 27.0]},
    }
    measurements = Measurements(
        {task: {arm: runs(s) for arm, s in arms.items()} for task, arms in scores.items()},
        {task: "single" for task in scores},
    )
    claims = {c["id"]: c for c in evaluate_claims(measurements, xlingual_claims())}
    claim = claims["xnli-diet-abs-lin>linformer"]
    # per model, the mean over the two languages: differences 1.0, 1.5, 1.5
    assert (claim["values"]["a"], claim["values"]["b"]) == ("diet-abs-lin", "linformer")
    assert claim["values"]["difference"]["difference"] == pytest.approx(4 / 3)
    half = 4.302652729911275 * math.sqrt(1 / 12) / math.sqrt(3)  # t(0.975, 2) s / sqrt(3)
    interval = claim["values"]["difference"]["interval"]
    assert interval == pytest.approx([4 / 3 - half, 4 / 3 + half])
    assert claim["verdict"] == "holds"
    assert claims["xnli-diet-abs>learned"]["reason"].startswith("not tested by this run")
