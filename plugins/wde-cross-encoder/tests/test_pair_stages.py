"""wde-cross-encoder's stages around the model, run on assembled pipelines: the input processor (pairs, texts,
errors naming the item and field), the pair tokenizer against the HF tokenizer's own pair encoding with
``truncation="only_second"`` (MiniLM's WordPiece with token types, a byte-level BPE without), and the score and
label output processors on HF's logits of a random BERT classifier and torch's sigmoid and softmax of them."""

from __future__ import annotations

import pytest
import torch
from cross_encoder_pipelines import ARCHITECTURE, assemble, stage
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

from wde_core.plugin_api import InputTypeError, InputValueError, Request, ScoreOptions
from wde_plugin_kit import bpe_tokenizer
from wde_plugin_kit.encoders import save_bert_classifier

QUERY = "Which animal jumps over the dog?"
PAIRS = [(QUERY, "The quick brown fox jumps over the lazy dog."), (QUERY, "lorem ipsum dolor " * 60),
         (QUERY, ""), ("", "an empty query"), ("Ünïcödé — quëry", "naïve café, 東京 and emoji 🙂")]


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    """A random BERT cross-encoder (one label, MiniLM's tokenizer, 96 positions) and its pipeline."""
    directory = save_bert_classifier(tmp_path_factory.mktemp("reranker"), seed=5)
    return directory, assemble(directory)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    """A random BERT classifier with three labels and its pipeline."""
    directory = save_bert_classifier(tmp_path_factory.mktemp("classifier"), num_labels=3, seed=6)
    return directory, assemble(directory)


def tokenized(pipeline, inputs, truncate=True) -> list[Request]:
    """The pipeline's requests for ``inputs`` after its input processor and tokenizer."""
    requests = stage(pipeline, "input_processor").process(inputs)
    stage(pipeline, "tokenizer").tokenize(requests, truncate=truncate)
    return requests


def hf_pairs(directory, pairs, max_length):
    """The HF tokenizer's own pair encoding: the document cut, never the query."""
    tokenizer = AutoTokenizer.from_pretrained(directory)
    return tokenizer([q for q, _ in pairs], [d for _, d in pairs], truncation="only_second", max_length=max_length)


def test_pairs_are_the_hf_pair_encoding_with_only_the_document_cut(reranker):
    directory, pipeline = reranker
    max_len = pipeline.settings.max_model_len
    long_query = ("a fairly long question " * 15, "lorem ipsum dolor " * 60)  # longest_first would cut both
    pairs = [*PAIRS, long_query]
    ours, theirs = tokenized(pipeline, pairs), hf_pairs(directory, pairs, max_len)
    assert [r.token_ids for r in ours] == theirs["input_ids"]
    assert [r.token_type_ids for r in ours] == theirs["token_type_ids"] and set(theirs["token_type_ids"][0]) == {0, 1}
    tokenizer = AutoTokenizer.from_pretrained(directory)
    for cut, query in ((ours[1], QUERY), (ours[-1], long_query[0])):
        query_ids = tokenizer(query)["input_ids"]  # [CLS] query [SEP]
        assert cut.num_tokens == max_len == 96 and cut.token_ids[:len(query_ids)] == query_ids


def test_a_bpe_tokenizer_without_token_types_pairs_as_hf_does(tmp_path):
    size = bpe_tokenizer(tmp_path)
    BertConfig(vocab_size=size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
               max_position_embeddings=40, type_vocab_size=1, num_labels=1,
               architectures=[ARCHITECTURE]).save_pretrained(tmp_path)
    pipeline = assemble(tmp_path)
    ours, theirs = tokenized(pipeline, PAIRS), hf_pairs(tmp_path, PAIRS, pipeline.settings.max_model_len)
    assert [r.token_ids for r in ours] == theirs["input_ids"] and max(map(len, theirs["input_ids"])) == 40
    assert all(r.token_type_ids is None for r in ours)


def test_a_query_that_leaves_no_room_is_refused_naming_it(reranker):
    _, pipeline = reranker
    special = AutoTokenizer.from_pretrained(reranker[0]).num_special_tokens_to_add(pair=True)
    with pytest.raises(InputValueError, match=rf"input 1: field 'query' has \d+ tokens; with the pair's {special} "
                                              r"special tokens it leaves no room for the document within "
                                              r"max_model_len=96; shorten the query") as refused:
        tokenized(pipeline, [PAIRS[0], ("a long query " * 40, "doc")])
    assert refused.value.index == 1


def test_without_truncation_an_overlong_pair_is_refused(reranker):
    _, pipeline = reranker
    whole = tokenized(pipeline, [PAIRS[0]], truncate=False)
    assert whole[0].token_ids == hf_pairs(reranker[0], [PAIRS[0]], None)["input_ids"][0]
    with pytest.raises(InputValueError, match=r"input 1: the \(query, document\) pair has \d+ tokens, more than "
                                              r"max_model_len=96; shorten the document or pass truncate=True"):
        tokenized(pipeline, PAIRS[:2], truncate=False)


def test_classify_tokenizes_single_texts_as_hf_and_pairs_as_pairs(classifier):
    directory, pipeline = classifier
    texts = ["A man is eating.", "word " * 200]
    ours = tokenized(pipeline, [texts[0], PAIRS[0], texts[1]])
    tokenizer = AutoTokenizer.from_pretrained(directory)
    singles = tokenizer(texts, truncation=True, max_length=96)["input_ids"]
    assert [ours[0].token_ids, ours[2].token_ids] == singles and ours[2].num_tokens == 96
    assert ours[0].token_type_ids is None and ours[2].token_type_ids is None
    assert ours[1].token_ids == hf_pairs(directory, [PAIRS[0]], 96)["input_ids"][0]
    assert [r.index for r in ours] == [0, 1, 2]


def test_rerank_inputs_are_pairs_in_order_with_their_options(reranker):
    processor = stage(reranker[1], "input_processor")
    requests = processor.process([("q", "d"), ["q2", "d2"]], options=ScoreOptions(raw_scores=True))
    assert [(r.index, r.text, r.options.raw_scores) for r in requests] == [(0, ("q", "d"), True),
                                                                          (1, ("q2", "d2"), True)]
    assert processor.process([("q", "d")])[0].options == ScoreOptions()


@pytest.mark.parametrize(("inputs", "error", "message"), [
    ([("q", "d"), ("q", 3)], InputTypeError, r"input 1: field 'document' must be a str, got int"),
    ([(None, "d")], InputTypeError, r"input 0: field 'query' must be a str, got NoneType"),
    (["not a pair"], InputTypeError, r"input 0: expected a \(query, document\) pair, got str"),
    ([("q", "d", "e")], InputTypeError, r"input 0: expected a \(query, document\) pair, got tuple of length 3"),
    ("q", TypeError, r"inputs: expected a list of \(query, document\) pairs, got str"),
    ([], ValueError, r"inputs: got an empty list; pass at least one item"),
], ids=["document", "query", "str", "triple", "bare-str", "empty"])
def test_bad_rerank_inputs_name_the_item_and_field(reranker, inputs, error, message):
    with pytest.raises(error, match=message):
        stage(reranker[1], "input_processor").process(inputs)


def test_classify_takes_a_text_or_a_pair_alone_and_refuses_prompts(classifier):
    processor = stage(classifier[1], "input_processor")
    assert [r.text for r in processor.process("one text")] == ["one text"]
    assert [r.text for r in processor.process(("q", "d"))] == [("q", "d")]
    with pytest.raises(InputTypeError, match=r"input 1: expected a \(query, document\) pair, got int"):
        processor.process(["text", 7])
    with pytest.raises(TypeError, match=r"inputs: expected a str or a list of str or pairs, got dict"):
        processor.process({"text": "x"})
    with pytest.raises(ValueError, match="cross-encoders take no prompt; put any instruction into the query"):
        processor.process(["text"], prompt="query: ")


def hf_logits(directory, inputs) -> torch.Tensor:
    """HF's logits for texts or pairs, one at a time, cut to the model's 96 positions (a pair: its document)."""
    model = BertForSequenceClassification.from_pretrained(directory).eval()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    texts = [item if isinstance(item, str) else item[0] for item in inputs]
    seconds = [None if isinstance(item, str) else item[1] for item in inputs]
    batch = [tokenizer(t, s, truncation=True if s is None else "only_second", max_length=96, return_tensors="pt")
             for t, s in zip(texts, seconds)]
    with torch.no_grad():
        return torch.cat([model(**encoded).logits for encoded in batch])


def test_scores_are_the_sigmoid_of_the_logit_or_the_raw_logit(reranker):
    directory, pipeline = reranker
    logits = hf_logits(directory, PAIRS[:3])
    requests = [Request(i, pair, ScoreOptions(raw_scores=i == 1)) for i, pair in enumerate(PAIRS[:3])]
    pooled = {"logits": logits, "scores": torch.sigmoid(logits)}  # what the core's pooler hands over
    scores = stage(pipeline, "output_processor").process(requests, pooled)
    expected = [torch.sigmoid(logits[0, 0]), logits[1, 0], torch.sigmoid(logits[2, 0])]
    assert all(type(s) is float for s in scores) and scores == pytest.approx([float(e) for e in expected], abs=1e-6)


def test_labels_are_named_by_id2label_with_softmax_probabilities(classifier):
    directory, pipeline = classifier
    inputs = [("A man is eating.", "Someone eats."), "a single text"]
    logits = hf_logits(directory, inputs)
    requests = [Request(i, item, ScoreOptions(raw_scores=i == 1)) for i, item in enumerate(inputs)]
    pooled = {"logits": logits, "scores": torch.softmax(logits, -1)}
    ours = stage(pipeline, "output_processor").process(requests, pooled)
    config = BertForSequenceClassification.config_class.from_pretrained(directory)
    labels = [config.id2label[i] for i in range(config.num_labels)]
    assert [list(row) for row in ours] == [labels, labels] == [["contradiction", "entailment", "neutral"]] * 2
    assert list(ours[0].values()) == pytest.approx(torch.softmax(logits[0], -1).tolist(), abs=1e-6)
    assert list(ours[1].values()) == pytest.approx(logits[1].tolist(), abs=1e-6)
    assert sum(ours[0].values()) == pytest.approx(1.0, abs=1e-6)
