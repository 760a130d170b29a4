"""The ``token_classify`` task (``classify_tokens``) on a random ``BertForTokenClassification``: every token's
record against HF's tokenizer and model, entities against transformers' token-classification pipeline (ignore_labels,
truncation), over-long texts and bad arguments refused before any batch runs, the task's refusals, AsyncEngine."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, BertForTokenClassification, pipeline

from wde_core import AsyncEngine, Engine
from wde_plugin_kit.token_classification import save_tiny_ner

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
TEXTS = ["My name is Sarah and I live in London.", "a", "The quick brown foxes jumped over the lazy dogs!",
         "Zürich's  naïve café-owners (xqzv) were walking; and   RUNNING."]
LONG = "People ask questions; the system finds documents that answer them. " * 5


@pytest.fixture(scope="module")
def ner_dir(tmp_path_factory):
    """A random ``BertForTokenClassification`` (weights of std 0.3) with the kit's WordPiece, 40 positions."""
    return save_tiny_ner(tmp_path_factory.mktemp("ner"), LABELS)


@pytest.fixture(scope="module")
def engine(ner_dir):
    """The engine serving the token classifier."""
    return Engine(str(ner_dir), device="cpu")


@pytest.fixture(scope="module")
def reference(ner_dir):
    """HF's model and transformers' token-classification pipeline on the same files."""
    model = BertForTokenClassification.from_pretrained(ner_dir, attn_implementation="eager").eval()
    return model, pipeline("token-classification", model=model, tokenizer=AutoTokenizer.from_pretrained(ner_dir))


def test_every_token_has_its_offsets_logits_label_and_score(engine, reference):
    model, ner = reference
    records = engine.classify_tokens(TEXTS)
    assert engine.task == "token_classify" and isinstance(records, list) and len(records) == len(TEXTS)
    for text, record in zip(TEXTS, records):
        encoded = ner.tokenizer(text, return_offsets_mapping=True, return_special_tokens_mask=True)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([encoded["input_ids"]])).logits[0]
        probabilities = torch.softmax(logits, -1)
        assert set(record) == {"tokens", "offsets", "special", "logits", "labels", "scores"}
        assert record["tokens"] == ner.tokenizer.convert_ids_to_tokens(encoded["input_ids"])
        assert record["offsets"].dtype == np.int64 and record["offsets"].tolist() == \
               [list(span) for span in encoded["offset_mapping"]]
        assert record["special"].tolist() == [bool(s) for s in encoded["special_tokens_mask"]]
        assert record["logits"].dtype == np.float32 and np.abs(record["logits"] - logits.numpy()).max() <= 1e-4
        assert record["labels"] == [LABELS[i] for i in logits.argmax(-1).tolist()]
        assert record["scores"].dtype == np.float32
        assert np.abs(record["scores"] - probabilities.max(-1).values.numpy()).max() <= 1e-5
    single = engine.classify_tokens(TEXTS[0])
    assert isinstance(single, dict) and single["tokens"] == records[0]["tokens"]
    start, end = records[3]["offsets"][1]  # the first token of the text, lower-cased and unaccented
    assert (start, TEXTS[3][start:end].lower().replace("ü", "u")) == (0, records[3]["tokens"][1])


def test_entities_and_ignore_labels_as_the_pipeline(engine, reference):
    _, ner = reference
    for strategy in ("none", "simple", "average"):
        for ignore in (None, [], ["O", "B-PER"]):
            ours = engine.classify_tokens(TEXTS, aggregation=strategy, ignore_labels=ignore)
            theirs = ner(TEXTS, aggregation_strategy=strategy, **({} if ignore is None else {"ignore_labels": ignore}))
            assert [[{k: v for k, v in e.items() if k != "score"} for e in x] for x in ours] == \
                   [[{k: v for k, v in e.items() if k != "score"} for e in x] for x in theirs]
            assert np.allclose([e["score"] for x in ours for e in x], [e["score"] for x in theirs for e in x],
                               atol=1e-4, rtol=0)
            assert all(type(e["score"]) is float and type(e["start"]) is int for x in ours for e in x)  # JSON-ready
    everything = engine.classify_tokens(TEXTS[0], aggregation="none", ignore_labels=[])
    assert [e["entity"] for e in everything] == engine.classify_tokens(TEXTS[0])["labels"][1:-1]


def test_over_long_texts_are_cut_refused_or_windowed(engine, reference, ner_dir):
    _, ner = reference
    cut = engine.classify_tokens([LONG, "short"], aggregation="simple")  # long_inputs="truncate": cut at 40 tokens
    assert cut == engine.classify_tokens([LONG, "short"], aggregation="simple", truncate=True)
    assert [[e["word"] for e in x] for x in cut] == [[e["word"] for e in x] for x in ner([LONG, "short"],
                                                                                        aggregation_strategy="simple")]
    kept = engine.classify_tokens(LONG)["offsets"][-2][1]  # where the last token before [SEP] ends
    assert kept < len(LONG) - 50 and max(e["end"] for e in cut[0]) <= kept
    windowed = engine.classify_tokens(LONG, aggregation="simple", stride=8)
    assert [e["word"] for e in windowed] == [e["word"] for e in ner(LONG, aggregation_strategy="simple", stride=8)]
    assert max(e["end"] for e in windowed) > len(LONG) - 10
    with pytest.raises(ValueError, match=r"^input 1: field 'text' has \d+ tokens, more than max_model_len=40; "
                                         r"shorten it, pass truncate=True, or stride=N for windows$"):
        engine.classify_tokens(["short", LONG], truncate=False)
    with pytest.raises(ValueError, match="input 0: field 'text'"):
        Engine(str(ner_dir), device="cpu", long_inputs="error").classify_tokens(LONG)
    with pytest.raises(ValueError, match="long_inputs='chunk' does not apply to classify_tokens: pass stride=N"):
        Engine(str(ner_dir), device="cpu", long_inputs="chunk").classify_tokens(LONG)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"aggregation": "mean"}, ValueError, "aggregation='mean': expected None or one of none, simple, first, average, "
                                          "max"),
    ({"aggregation": "simple", "stride": -1}, ValueError, r"stride=-1: expected an integer from 0 to 37 "),
    ({"aggregation": "simple", "stride": 38}, ValueError, "stride=38: expected"),
    ({"aggregation": "simple", "stride": True}, ValueError, "stride=True: expected"),
    ({"stride": 4}, ValueError, "stride=4 needs an aggregation that resolves overlapping windows"),
    ({"aggregation": "none", "stride": 4}, ValueError, "not 'none'"),
    ({"aggregation": "max", "stride": 4, "truncate": True}, ValueError, "pass stride .* or truncate, not both"),
    ({"ignore_labels": ["O"]}, ValueError, "ignore_labels applies to an aggregation"),
    ({"aggregation": "simple", "ignore_labels": "O"}, TypeError, "ignore_labels: expected a list of str"),
    ({"aggregation": "simple", "ignore_labels": 5}, TypeError, "ignore_labels: expected a list of str"),
    ({"truncate": "chunk"}, ValueError, "truncate='chunk'"),
])
def test_bad_arguments_are_refused_before_any_batch(engine, kwargs, error, message):
    ran = []
    engine.batch_listeners.append(ran.append)
    try:
        with pytest.raises(error, match=message):
            engine.classify_tokens(TEXTS, **kwargs)
        with pytest.raises(TypeError, match="input 1: field 'text' must be a str, got int"):
            engine.classify_tokens(["fine", 3])
    finally:
        engine.batch_listeners.remove(ran.append)
    assert ran == []


def test_the_task_serves_token_classifiers_only(engine, tiny_bert_dir):
    with pytest.raises(TypeError, match=r"classify_tokens\(\) serves the 'token_classify' task, but model .* is "
                                        r"served for the 'embed' task"):
        Engine(str(tiny_bert_dir), device="cpu").classify_tokens("text")
    with pytest.raises(TypeError, match=r"encode\(\) serves the 'embed' task, .* 'token_classify' task; use "
                                        r"classify_tokens\(\)$"):
        engine.encode("text")


def test_async_engine_classifies_tokens(ner_dir, engine):
    async def run():
        async_engine = AsyncEngine(str(ner_dir), device="cpu")
        try:
            return await asyncio.gather(async_engine.classify_tokens(TEXTS),
                                        async_engine.classify_tokens(LONG, aggregation="first", stride=5))
        finally:
            await async_engine.close()

    records, entities = asyncio.run(run())
    assert entities == engine.classify_tokens(LONG, aggregation="first", stride=5)
    for ours, expected in zip(records, engine.classify_tokens(TEXTS)):
        assert ours["labels"] == expected["labels"] and np.abs(ours["logits"] - expected["logits"]).max() <= 1e-6
