"""BERT cross-encoders (wde-reranker on wde-cross-encoder's workflows and stages): random-weight BERT sequence
classifiers against HF logits and sentence-transformers' CrossEncoder, the pair stages' truncation and errors,
and the real all-MiniLM-L6-v2 backbone with a seeded head on real query/paragraph pairs (XLM-R's cross-encoders:
wde-xlm-roberta's tests)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

from wde_plugin_kit.corpus import WIKI_NAME, minilm_path, shared_dir
from wde_plugin_kit.encoders import save_bert_classifier, write_tokenizer
from wde_core import Engine, get_plugin_host
from wde_core.cli.main import cli

TOL = 1e-4
BACKENDS = ["torch_sdpa", "eager"]
QUERY = "Which animal jumps over the dog?"
DOCS = ["The quick brown fox jumps over the lazy dog.", "Stock markets fell sharply on Monday.",
        "A fox is a small omnivorous mammal.", "", "dogs " * 400, "The quick brown fox jumps over the lazy dog."]


@pytest.fixture(scope="module")
def bert_ce(tmp_path_factory):
    return save_bert_classifier(tmp_path_factory.mktemp("bert-ce"), seed=1)


def hf_logits(directory, pairs, max_length):
    """HF's logits for the pairs: padded batch, documents truncated (``only_second``)."""
    model = BertForSequenceClassification.from_pretrained(directory, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    batch = tokenizer([q for q, _ in pairs], [d for _, d in pairs], padding=True, truncation="only_second",
                      max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        return model(**batch).logits.numpy()


@pytest.mark.parametrize("backend", BACKENDS)
def test_logits_match_hf(bert_ce, backend):
    engine = Engine(str(bert_ce), device="cpu", attention_backend=backend)
    assert (engine.task, engine.pipeline.link.variant, engine.pipeline.link.provider) == (
        "rerank", "single-logit", "wde-reranker")
    assert engine.pipeline.workflow.provider == "wde-cross-encoder"
    pairs = [(QUERY, d) for d in DOCS] + [("", "empty query"), ("short", "x")]
    ours = engine.score(pairs, raw_scores=True)
    theirs = hf_logits(bert_ce, pairs, engine.pipeline.settings.max_model_len)[:, 0]
    assert ours.shape == (len(pairs),) and ours.dtype == np.float32
    assert np.abs(ours - theirs).max() <= TOL
    assert np.abs(engine.score(pairs) - 1 / (1 + np.exp(-theirs))).max() <= TOL  # sigmoid by default


def test_predict_and_rank_match_sentence_transformers(bert_ce):
    from sentence_transformers import CrossEncoder

    engine = Engine(str(bert_ce), device="cpu")
    reference = CrossEncoder(str(bert_ce), device="cpu", max_length=engine.pipeline.settings.max_model_len)
    docs = DOCS[:4] + ["Foxes and dogs are both canids.", "Jumping is a form of locomotion."]
    pairs = [(QUERY, d) for d in docs]
    assert np.abs(engine.score(pairs) - reference.predict(pairs)).max() <= TOL
    ours = engine.rerank(QUERY, docs, return_documents=True)
    theirs = reference.rank(QUERY, docs, return_documents=True)
    assert [r["index"] for r in ours] == [r["corpus_id"] for r in theirs]
    assert np.abs(np.array([r["score"] for r in ours]) - [r["score"] for r in theirs]).max() <= TOL
    assert [r["document"] for r in ours] == [r["text"] for r in theirs]


def test_rerank_order_top_n_duplicates_and_empty(bert_ce):
    engine = Engine(str(bert_ce), device="cpu")
    scores = engine.score([(QUERY, d) for d in DOCS])
    ranked = engine.rerank(QUERY, DOCS)
    assert [r["index"] for r in ranked] == sorted(range(len(DOCS)), key=lambda i: (-scores[i], i))
    assert all(a["score"] >= b["score"] for a, b in zip(ranked, ranked[1:]))
    duplicate = [r for r in ranked if r["index"] in (0, 5)]  # DOCS[0] == DOCS[5]: same score, input order
    assert duplicate[0]["score"] == duplicate[1]["score"] and [r["index"] for r in duplicate] == [0, 5]
    assert engine.rerank(QUERY, DOCS, top_n=2) == ranked[:2]
    assert engine.rerank(QUERY, DOCS, top_n=100) == ranked
    assert engine.rerank(QUERY, []) == []
    assert "document" not in ranked[0]
    assert engine.rerank("", [""])[0]["index"] == 0  # empty strings are valid text


def test_long_documents_are_cut_never_the_query(bert_ce):
    engine = Engine(str(bert_ce), device="cpu")
    max_len = engine.pipeline.settings.max_model_len
    long_doc = "lorem ipsum " * 300
    requests = engine.prepare("score", [(QUERY, long_doc)], raw_scores=False, truncate=True).requests
    tokenizer = AutoTokenizer.from_pretrained(bert_ce)
    query_ids = tokenizer(QUERY)["input_ids"]
    assert requests[0].num_tokens == max_len and requests[0].token_ids[: len(query_ids)] == query_ids
    with pytest.raises(ValueError, match=rf"input 1: the \(query, document\) pair has \d+ tokens, more than "
                                         rf"max_model_len={max_len}; shorten the document or pass truncate=True"):
        engine.score([(QUERY, "short"), (QUERY, long_doc)], truncate=False)
    with pytest.raises(ValueError, match=r"input 0: field 'query' has \d+ tokens; .* leaves no room for the "
                                         rf"document within max_model_len={max_len}; shorten the query"):
        engine.rerank("very long query " * 40, ["doc"])


def test_bad_input_names_the_item_and_field_and_the_engine_keeps_serving(bert_ce):
    engine = Engine(str(bert_ce), device="cpu")
    with pytest.raises(TypeError, match=r"input 1: field 'document' must be a str, got int"):
        engine.score([("q", "d"), ("q", 3)])
    with pytest.raises(TypeError, match=r"input 0: expected a \(query, document\) pair, got str"):
        engine.score(["not a pair"])
    with pytest.raises(TypeError, match=r"query: expected a str \(or an image, for a reranker that reads images\), "
                                         r"got NoneType"):
        engine.rerank(None, ["d"])
    with pytest.raises(TypeError, match=r"input 0: field 'query' must be a str, got dict"):  # a text model's refusal
        engine.rerank({"image": b"not read"}, ["d"])
    with pytest.raises(TypeError, match=r"documents: expected a list of str, got str"):
        engine.rerank("q", "a single string")
    with pytest.raises(ValueError, match=r"top_n=0: expected a positive integer or None"):
        engine.rerank("q", ["d"], top_n=0)
    with pytest.raises(ValueError, match=r"inputs: got an empty list"):
        engine.score([])
    assert engine.score([("q", "still serving")]).shape == (1,)


def test_each_task_refuses_the_others_methods(bert_ce, tiny_bert_dir):
    reranker = Engine(str(bert_ce), device="cpu")
    with pytest.raises(TypeError, match=r"encode\(\) serves the 'embed' task, but model .* is served for the "
                                        r"'rerank' task; use score\(\) and rerank\(\)"):
        reranker.encode(["text"])
    with pytest.raises(TypeError, match=r"classify\(\) serves the 'classify' task, .* 'rerank' task"):
        reranker.classify(["text"])
    embedder = Engine(str(tiny_bert_dir), device="cpu")
    with pytest.raises(TypeError, match=r"rerank\(\) serves the 'rerank' task, but model .* is served for the "
                                        r"'embed' task; use encode\(\)"):
        embedder.rerank("q", ["d"])


def test_classify_gives_label_probabilities(tmp_path):
    directory = save_bert_classifier(tmp_path / "nli", num_labels=3, seed=4)
    engine = Engine(str(directory), device="cpu")
    assert engine.task == "classify" and engine.pipeline.reasons["activation"] == "softmax over labels"
    inputs = [("A man is eating.", "Someone eats."), "a single text", ("", "")]
    ours = engine.classify(inputs)
    assert [list(r) for r in ours] == [["contradiction", "entailment", "neutral"]] * 3
    model = BertForSequenceClassification.from_pretrained(directory).eval()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    for result, item in zip(ours, inputs):
        # lists: a single call tokenizer("", "") would drop the empty second text and encode no pair
        batch = tokenizer(*(([item],) if isinstance(item, str) else ([item[0]], [item[1]])), return_tensors="pt")
        with torch.no_grad():
            logits = model(**batch).logits[0]
        assert np.abs(np.array(list(result.values())) - torch.softmax(logits, -1).numpy()).max() <= TOL
        raw = engine.classify(item, raw_scores=True)
        assert isinstance(raw, dict) and np.abs(np.array(list(raw.values())) - logits.numpy()).max() <= TOL


def test_the_activation_in_sentence_transformers_config_is_honoured(tmp_path, bert_ce):
    from sentence_transformers import CrossEncoder

    directory = shutil.copytree(bert_ce, tmp_path / "identity")
    config = json.loads((directory / "config.json").read_text())
    config["sentence_transformers"] = {"activation_fn": "torch.nn.modules.linear.Identity"}
    (directory / "config.json").write_text(json.dumps(config))
    engine = Engine(str(directory), device="cpu")
    assert "Identity" in engine.pipeline.reasons["activation"]
    pairs = [(QUERY, d) for d in DOCS[:3]]
    assert np.abs(engine.score(pairs) - CrossEncoder(str(directory), device="cpu").predict(pairs)).max() <= TOL
    assert np.abs(engine.score(pairs) - engine.score(pairs, raw_scores=True)).max() == 0


def test_cli_rerank(bert_ce, tmp_path):
    get_plugin_host().register_commands(cli)
    engine = Engine(str(bert_ce), device="cpu")
    result = CliRunner().invoke(cli, ["rerank", "-m", str(bert_ce), "--query", QUERY, "--top-n", "2",
                                      "--return-documents", *DOCS[:3]])
    assert result.exit_code == 0, result.output
    printed, expected = json.loads(result.output), engine.rerank(QUERY, DOCS[:3], top_n=2, return_documents=True)
    assert [(r["index"], r["document"]) for r in printed] == [(r["index"], r["document"]) for r in expected]
    assert [r["score"] for r in printed] == pytest.approx([r["score"] for r in expected], abs=1e-6)
    inspect = CliRunner().invoke(cli, ["inspect", str(bert_ce)])
    assert "activation: sigmoid   (single logit: sigmoid" in inspect.output and "task: rerank" in inspect.output
    docs = tmp_path / "docs.jsonl"
    docs.write_text("\n".join(json.dumps({"id": f"d{i}", "text": d}) for i, d in enumerate(DOCS[:3])))
    from_file = json.loads(CliRunner().invoke(cli, ["rerank", "-m", str(bert_ce), QUERY, "-i", str(docs)]).output)
    assert [r["id"] for r in from_file] == [f"d{r['index']}" for r in from_file]
    stdin = CliRunner().invoke(cli, ["rerank", "-m", str(bert_ce), QUERY], input="one\ntwo\n")
    assert sorted(r["index"] for r in json.loads(stdin.output)) == [0, 1]


# --- the real all-MiniLM-L6-v2 backbone with a seeded head ----------------------------------------------
@pytest.fixture(scope="module")
def minilm_ce(tmp_path_factory):
    from safetensors.torch import load_file

    directory = tmp_path_factory.mktemp("minilm-ce")
    config = BertConfig.from_pretrained(minilm_path())
    config.num_labels = 1
    config.architectures = ["BertForSequenceClassification"]
    model = BertForSequenceClassification(config).eval()
    state = load_file(str(minilm_path() / "model.safetensors"))
    state.pop("embeddings.position_ids", None)
    missing = model.bert.load_state_dict(state, strict=False).missing_keys
    assert missing == []  # the real backbone and pooler; only the classifier is seeded
    torch.manual_seed(0)
    torch.nn.init.normal_(model.classifier.weight, std=0.2)
    torch.nn.init.normal_(model.classifier.bias, std=0.2)
    model.save_pretrained(directory)
    write_tokenizer(directory)
    return directory


@pytest.mark.slow
def test_real_backbone_cross_encoder_on_wiki_pairs(minilm_ce):
    with open(shared_dir() / WIKI_NAME, encoding="utf-8") as corpus:
        records = [json.loads(line) for line in corpus][:120]
    pairs = [(r["title"], p["text"]) for r in records[::12] for p in records[:24]]  # 10 queries x 24 paragraphs
    assert len(pairs) >= 200
    engine = Engine(str(minilm_ce), device="cpu")
    ours = engine.score(pairs, raw_scores=True)
    max_len = engine.pipeline.settings.max_model_len
    theirs = np.concatenate([hf_logits(minilm_ce, pairs[i: i + 24], max_len)[:, 0] for i in range(0, len(pairs), 24)])
    assert np.abs(ours - theirs).max() <= TOL
    assert np.std(theirs) > 0.05  # a real spread of scores, not a constant


def test_async_engine_scores_reranks_and_classifies_concurrently(bert_ce, tmp_path):
    import asyncio

    from wde_core import AsyncEngine

    sync = Engine(str(bert_ce), device="cpu")
    queries = [QUERY, "markets", "fox", ""]

    async def many():
        engine = AsyncEngine(str(bert_ce), device="cpu")
        try:
            ranked = await asyncio.gather(*(engine.rerank(q, DOCS, top_n=3) for q in queries))
            scores = await engine.score([(QUERY, d) for d in DOCS])
            with pytest.raises(TypeError, match="classify\\(\\) serves the 'classify' task"):
                await engine.classify("text")
            return ranked, scores, await engine.rerank(QUERY, [])
        finally:
            await engine.close()

    ranked, scores, empty = asyncio.run(many())
    for q, result in zip(queries, ranked):
        expected = sync.rerank(q, DOCS, top_n=3)
        assert [r["index"] for r in result] == [r["index"] for r in expected]
        assert np.abs(np.array([r["score"] for r in result]) - [r["score"] for r in expected]).max() <= 1e-6
    assert np.abs(scores - sync.score([(QUERY, d) for d in DOCS])).max() <= 1e-6 and empty == []
