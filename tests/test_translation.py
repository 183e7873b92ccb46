"""Decoding and scoring proofs: beam 1 is greedy, beam search finds the exhaustive optimum,
BLEU of the references is 100 and of shuffled output near 0; bad input; a smoke run that
beats copying the source."""

from __future__ import annotations

import itertools
import json
import random

import pytest
import torch
from test_lab_runs import tensorboard_scalars
from test_seq2seq import TABLE4, seq2seq
from translation_fixtures import build_toy_translation

from posattn.data.identity import folder_digest
from posattn.data.translation_tokenizer import load_translation_tokenizer
from posattn.errors import PosAttnConfigError
from posattn.lab.translation.data import encode_pairs
from posattn.lab.translation.decoding import (
    SearchSettings,
    beam_search,
    greedy_search,
    length_penalty,
)
from posattn.lab.translation.runconfig import load_translation_config
from posattn.lab.translation.scoring import corpus_scores, paired_significance
from posattn.lab.translation.translate import (
    CachedScorer,
    RecomputingScorer,
    encode_sources,
    translate_ids,
)

START, EOS = 2, 3


def model_scorer(encoding: str, rows: int = 3, seed: int = 0):
    model = seq2seq(encoding, seed=seed)
    src = torch.randint(4, 30, (rows, 6), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(src)
    return model, src, mask, RecomputingScorer(model, model.encode(src, mask), mask)


@pytest.mark.parametrize("encoding", ["sinusoidal", "shaw", "diet-rel", "rope"])
def test_beam_of_one_is_greedy(encoding):
    _, src, _, scorer = model_scorer(encoding)
    greedy = greedy_search(scorer, len(src), START, EOS, max_new_tokens=12)
    beam = beam_search(scorer, len(src), START, EOS, SearchSettings(1, 0.6, 12))
    assert beam == greedy and any(greedy)


class TableScorer:
    """Log-probabilities as a fixed random function of the prefix (4 tokens: 0-2 and </s>)."""

    vocab = 4

    def __init__(self, eos: int) -> None:
        self.eos = eos

    def log_probs(self, prefix: tuple[int, ...]) -> torch.Tensor:
        seed = hash(prefix) % (2**31)
        logits = torch.randn(self.vocab, generator=torch.Generator().manual_seed(seed)) * 2
        return torch.log_softmax(logits.double(), -1)

    def __call__(self, prefixes, parents):
        return torch.stack([self.log_probs(tuple(row)) for row in prefixes.tolist()])


def exhaustive_best(scorer: TableScorer, start: int, limit: int, alpha: float) -> list[int]:
    """max over every output of log P / lp: ended by </s> within the limit, or cut at it."""
    best, best_score = None, float("-inf")
    for length in range(1, limit + 1):
        others = [t for t in range(scorer.vocab) if t != scorer.eos]
        for body in itertools.product(others, repeat=length - 1):
            for last in [scorer.eos] + (others if length == limit else []):
                tokens = (*body, last)
                prefix, total = (start,), 0.0
                for token in tokens:
                    total += float(scorer.log_probs(prefix)[token])
                    prefix += (token,)
                score = total / length_penalty(length, alpha)
                if score > best_score:
                    best, best_score = [t for t in tokens if t != scorer.eos], score
    return best


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_wide_beam_finds_the_exhaustive_optimum(alpha):
    # start token 4 is outside the output vocabulary; a beam of 64 never prunes at length 3
    scorer = TableScorer(eos=3)
    for trial in range(3):
        start = 4 + trial
        found = beam_search(scorer, 1, start, 3, SearchSettings(64, alpha, 3))
        assert found == [exhaustive_best(scorer, start, 3, alpha)]


def test_bleu_and_chrf_of_the_scoring_path():
    references = [
        "In the beginning God created the heaven and the earth.",
        "And the earth was without form, and void.",
        "And God said, Let there be light: and there was light.",
        "And God saw the light, that it was good.",
        "And the evening and the morning were the first day.",
    ]
    same = corpus_scores(references, references)
    assert same["bleu"] == pytest.approx(100.0) and same["chrf"] == pytest.approx(100.0)
    words = " ".join(references).split()
    random.Random(0).shuffle(words)
    shuffled = [" ".join(words[i::5]) for i in range(5)]
    assert corpus_scores(shuffled, references)["bleu"] < 5.0
    with pytest.raises(PosAttnConfigError, match="one per reference"):
        corpus_scores(references[:2], references)


def test_paired_significance_separates_a_better_system_from_a_tie():
    rng = random.Random(0)
    references = [" ".join(rng.choice("abcdefghij") * 3 for _ in range(8)) for _ in range(60)]

    def damaged(sentence: str) -> str:
        return " ".join(sentence.split()[:4])

    # System B repairs the second half of A's damaged outputs: better, surely not by chance.
    a = [damaged(r) for r in references]
    b = a[:30] + references[30:]
    better = paired_significance(a, b, references)
    scores_a, scores_b = corpus_scores(a, references), corpus_scores(b, references)
    assert better["bleu"]["difference"] == pytest.approx(scores_b["bleu"] - scores_a["bleu"])
    assert better["bleu"]["difference"] > 10 and better["bleu"]["p_value"] < 0.01
    assert better["chrf"]["p_value"] < 0.01
    # C damages the other half: as good as A on average, so no significance.
    c = references[:30] + [damaged(r) for r in references[30:]]
    d = [damaged(r) for r in references[:30]] + references[30:]
    tie = paired_significance(c, d, references, test_type="bs")
    assert tie["bleu"]["p_value"] > 0.2
    same = paired_significance(a, a, references)
    assert same["bleu"]["p_value"] == 1.0 and same["bleu"]["difference"] == 0.0
    with pytest.raises(PosAttnConfigError, match="test_type='t'"):
        paired_significance(a, b, references, test_type="t")


def test_bad_decoding_input():
    with pytest.raises(PosAttnConfigError, match="beam_size=0"):
        SearchSettings(beam_size=0)
    with pytest.raises(PosAttnConfigError, match="length_penalty=-1"):
        SearchSettings(length_penalty=-1)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return build_toy_translation(tmp_path_factory.mktemp("toy-data"))


def test_too_long_sources_and_pairs_fail_or_are_truncated_and_counted(toy):
    tokenizer = load_translation_tokenizer(toy / "translation/toy/tokenizer")
    long_source = " ".join(["cat dog"] * 20)
    with pytest.raises(PosAttnConfigError, match=r"source 2='\d+ tokens'.*max_len=8"):
        encode_sources(tokenizer, ["cat", long_source], max_length=8, truncate=False)
    encoded = encode_sources(tokenizer, ["cat", long_source], max_length=8, truncate=True)
    assert encoded.truncated == [1] and encoded.input_ids.shape == (2, 8)
    assert encoded.input_ids[1, -1] == tokenizer.eos_token_id
    pairs = [("cat", "tac"), ("cat", " ".join(["tac god"] * 20))]
    with pytest.raises(PosAttnConfigError, match=r"train pair 2 \(target\)"):
        encode_pairs(tokenizer, pairs, 8, "error", "train pair")
    assert encode_pairs(tokenizer, pairs, 8, "drop").dropped == 1
    # every pair dropped: the Trainer had failed on an empty dataset (an IndexError)
    with pytest.raises(PosAttnConfigError, match=r"model.max_len=2 .*every train pair of the 2"):
        encode_pairs(tokenizer, pairs, 2, "drop", "train pair")
    truncated = encode_pairs(tokenizer, pairs, 8, "truncate")
    assert truncated.truncated == 1 and len(truncated.dataset[1]["labels"]) == 8


def test_model_limit_applies_to_decoding():
    model, src, mask, _ = model_scorer("diet-rel")
    outputs = translate_ids(model, src, mask, SearchSettings(2, 0.6, max_new_tokens=100))
    assert all(len(row) <= model.config.max_len for row in outputs)


def test_smoke_run_beats_copying_the_source(toy, tmp_path):
    from posattn.lab.translation.train import train_translation

    torch.set_num_threads(1)
    config = load_translation_config(
        "smoke",
        overrides=[
            f"data.data_dir={toy}",
            "data.pairs=toy",
            "model.encoding=sinusoidal",
            "model.d_model=48",
            "model.ffn_dim=96",
            "train.steps=600",
            "train.batch_size=32",
            "train.learning_rate=3e-3",
            "train.eval_steps=300",
            "train.save_steps=300",
            "train.logging_steps=100",
            "decode.splits=[dev]",
            "decode.beam_size=3",
        ],
    )
    with torch.random.fork_rng():
        metrics = train_translation(config, tmp_path / "run")
    dev = metrics["evaluation"]["dev"]
    assert dev["copy_source"]["bleu"] < 5
    assert dev["beam"]["bleu"] > dev["copy_source"]["bleu"] + 20
    assert dev["greedy"]["bleu"] > dev["copy_source"]["bleu"] + 20
    saved = json.loads((tmp_path / "run/metrics.json").read_text())
    assert saved["steps"] == 600 and (tmp_path / "run/model/model.safetensors").is_file()
    assert "label_smoothing: 0.1" in (tmp_path / "run/config.yaml").read_text()
    # logged to TensorBoard like pretraining: the run's losses at its logging steps
    logged = tensorboard_scalars(tmp_path / "run")
    assert [step for step, _ in logged] == [s for s, _ in saved["train_loss"]]
    for (_, value), (_, loss) in zip(logged, saved["train_loss"], strict=True):
        assert value == pytest.approx(loss, rel=1e-5)


def test_translate_eval_reports_bad_files_and_beam_sizes(toy, tmp_path, capsys):
    from posattn.cli import entry
    from posattn.models.seq2seq import PosAttnForSeq2SeqLM, PosAttnSeq2SeqConfig

    tokenizer = load_translation_tokenizer(toy / "translation/toy/tokenizer")
    config = PosAttnSeq2SeqConfig(
        vocab_size=len(tokenizer), d_model=16, num_heads=2, num_layers=1, ffn_dim=32, max_len=16
    )
    PosAttnForSeq2SeqLM(config).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    (tmp_path / "a.src").write_text("the cat\nthe dog\n")
    (tmp_path / "a.tgt").write_text("el gato\n")
    base = ["translate", "eval", "--model", str(tmp_path / "model"), "--preset", "smoke"]
    files = ["--source", str(tmp_path / "a.src"), "--target", str(tmp_path / "a.tgt")]
    assert entry(base + files) == 2
    assert "ends after line 1" in capsys.readouterr().err
    (tmp_path / "a.tgt").write_text("el gato\nel perro\n")
    assert entry([*base, *files, "decode.beam_size=0"]) == 2
    assert "beam_size=0" in capsys.readouterr().err
    (tmp_path / "a.src").write_text("the cat\n" + "the dog " * 20 + "\n")
    assert entry(base + files) == 2
    assert "source 2=" in capsys.readouterr().err
    assert entry([*base, *files, "--truncate"]) == 0
    assert "1 of 2 sources truncated" in capsys.readouterr().out


def test_translate_eval_scores_a_prepared_split_as_the_run_scored_it(toy, tmp_path, capsys):
    """data.too_long=drop (the presets' setting) leaves the pairs over the model's max_len
    out of a prepared split, as training's final evaluation does, and says how many;
    data.too_long=error refuses them and --truncate keeps every pair."""
    from posattn.cli import entry
    from posattn.models.seq2seq import PosAttnForSeq2SeqLM, PosAttnSeq2SeqConfig

    tokenizer = load_translation_tokenizer(toy / "translation/toy/tokenizer")
    max_len = 6
    config = PosAttnSeq2SeqConfig(
        vocab_size=len(tokenizer), d_model=16, num_heads=2, num_layers=1, ffn_dim=32,
        max_len=max_len, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.bos_token_id,
    )  # fmt: skip
    PosAttnForSeq2SeqLM(config).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    sources = (toy / "translation/toy/test.src").read_text().splitlines()
    targets = (toy / "translation/toy/test.tgt").read_text().splitlines()
    fitting = [
        target
        for source, target in zip(sources, targets, strict=True)
        if max(len(tokenizer(text)["input_ids"]) for text in (source, target)) <= max_len
    ]
    assert 0 < len(fitting) < len(targets)  # the fixture has pairs on both sides of the limit
    base = ["translate", "eval", "--model", str(tmp_path / "model"), "--preset", "smoke",
            "--data-dir", str(toy), "data.pairs=toy", "decode.max_new_tokens=4"]  # fmt: skip
    assert entry([*base, "--output", str(tmp_path / "drop.json")]) == 0
    dropped = len(targets) - len(fitting)
    assert f"({dropped} pairs over max_len left out" in capsys.readouterr().out
    scores = json.loads((tmp_path / "drop.json").read_text())
    assert scores["references"] == fitting and scores["pairs_dropped_too_long"] == dropped
    assert entry([*base, "data.too_long=error"]) == 2
    assert "max_len=6" in capsys.readouterr().err
    assert entry([*base, "--truncate", "--output", str(tmp_path / "cut.json")]) == 0
    scores = json.loads((tmp_path / "cut.json").read_text())
    assert scores["references"] == targets and "pairs_dropped_too_long" not in scores


class PairedScorer:
    """Runs the cached and the recomputing scorer side by side and checks every step."""

    def __init__(self, model, memory, mask):
        self.cached = CachedScorer(model, memory, mask)
        self.full = RecomputingScorer(model, memory, mask)
        self.steps = 0

    def __call__(self, prefixes, parents):
        cached, full = self.cached(prefixes, parents), self.full(prefixes, parents)
        torch.testing.assert_close(cached, full, rtol=1e-9, atol=1e-9)
        self.steps += 1
        return full


@pytest.mark.parametrize("encoding", [*TABLE4, "alibi", "deberta", "kerple"])
def test_cached_decoding_equals_the_full_forward(encoding):
    """Beam search reorders the cache at every step; greedy does not."""
    model, src, mask, _ = model_scorer(encoding)
    memory = model.encode(src, mask)
    k = 3
    rows = torch.arange(len(src)).repeat_interleave(k)
    paired = PairedScorer(model, memory[rows], mask[rows])
    beam_search(paired, len(src), START, EOS, SearchSettings(k, 0.6, 12))
    assert paired.steps >= 5
    paired = PairedScorer(model, memory, mask)
    greedy = greedy_search(paired, len(src), START, EOS, 12)
    assert greedy == translate_ids(model, src, mask, SearchSettings(1, 0.6, 12))


def test_report_names_a_best_or_worst_only_without_overlap():
    from posattn.lab.translation.report import verdict

    separated = {"a": [1.0, 1.1], "b": [2.0, 2.1], "c": [2.2, 2.4]}
    assert verdict("loss", separated, higher_is_better=False) == [
        "- loss: `a` is best on every seed (its spread overlaps no other).",
        "- loss: `c` is worst on every seed (its spread overlaps no other).",
    ]
    overlapping = {"a": [1.0, 2.2], "b": [2.0, 2.1], "c": [1.5, 2.4]}
    assert verdict("BLEU", overlapping, higher_is_better=True) == [
        "- BLEU: highest median `b`, but seed spreads overlap: no clear winner."
    ]


def test_translation_compare_reuses_only_runs_of_the_same_settings(toy, tmp_path):
    from posattn.cli import main

    output = tmp_path / "compare"
    base = ["compare", "--task", "translation", "--preset", "smoke", "--data-dir", str(toy),
            "--output", str(output), "--encodings", "sinusoidal", "data.pairs=toy"]  # fmt: skip
    metrics = output / "sinusoidal" / "seed0" / "metrics.json"
    torch.set_num_threads(1)
    with torch.random.fork_rng():
        assert main(base) == 0
        first = metrics.stat().st_mtime_ns
        stage = json.loads((metrics.parent / "stage.json").read_text())
        assert stage["data"] == {"translation/toy": folder_digest(toy / "translation" / "toy")}
        assert main(base) == 0  # read back, not retrained
        assert metrics.stat().st_mtime_ns == first
        assert (
            "computed; reused from earlier invocations, whose time is not in it: 1."
            in (output / "results.md").read_text()
        )
        with pytest.raises(PosAttnConfigError, match=r"train\.steps: 12 -> 6.*--overwrite"):
            main([*base, "train.steps=6"])
        assert metrics.stat().st_mtime_ns == first
        assert main([*base, "train.steps=6", "--overwrite"]) == 0
    assert json.loads(metrics.read_text())["steps"] == 6
    assert "| `sinusoidal` |" in (output / "results.md").read_text()


def test_translation_compare_tests_each_encoding_against_the_first(toy, tmp_path):
    from posattn.cli import main

    output = tmp_path / "compare"
    torch.set_num_threads(1)
    with torch.random.fork_rng():
        assert main(["compare", "--task", "translation", "--preset", "smoke", "--data-dir",
                     str(toy), "--output", str(output), "--encodings", "sinusoidal,t5",
                     "data.pairs=toy", "train.curve_steps=6"]) == 0  # fmt: skip
    summary = json.loads((output / "results.json").read_text())
    # The learning curves: points at steps 6 and 12 of each run, a figure and a section.
    assert summary["curve"]["steps"] == [6, 12]
    assert set(summary["curve"]["first_beats_copy"]) == {"sinusoidal", "t5"}
    assert (output / "curve.png").stat().st_size > 1000
    markdown = (output / "results.md").read_text()
    assert "## Learning curve" in markdown and "one seed per encoding" in markdown.lower()
    test = summary["significance"]["t5"]
    assert test["against"] == "sinusoidal" and test["test"] == "ar"
    runs = summary["results"]
    stacked = {
        e: [
            h
            for s in test["seeds"]
            for h in runs[e][str(s)]["evaluation"]["test"]["beam"]["hypotheses"]
        ]
        for e in ("sinusoidal", "t5")
    }
    references = [
        r for s in test["seeds"] for r in runs["t5"][str(s)]["evaluation"]["test"]["references"]
    ]
    expected = corpus_scores(stacked["t5"], references)["bleu"]
    expected -= corpus_scores(stacked["sinusoidal"], references)["bleu"]
    assert test["bleu"]["difference"] == pytest.approx(expected)
    assert 0 < test["bleu"]["p_value"] <= 1
    assert "## Paired significance" in (output / "results.md").read_text()
    # The same runs read back by `translate combine` (arms by folder, under other names) give
    # the joint comparison's results, paired tests and curves.
    combined = tmp_path / "combined"
    assert main(["translate", "combine", "--output", str(combined), f"sin={output / 'sinusoidal'}",
                 f"rel={output / 't5'}"]) == 0  # fmt: skip
    again = json.loads((combined / "results.json").read_text())
    assert again["results"] == {"sin": runs["sinusoidal"], "rel": runs["t5"]}
    assert again["significance"]["rel"] == {**test, "against": "sin"}
    assert again["curve"]["steps"] == summary["curve"]["steps"]
    assert again["setting_differences"] == {}
    sources = {"sin": [str(output / "sinusoidal")], "rel": [str(output / "t5")]}
    assert again["context"]["sources"] == sources
