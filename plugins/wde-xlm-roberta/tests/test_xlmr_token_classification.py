"""``XLMRobertaForTokenClassification`` (wde-xlm-roberta) through ``classify_tokens``: random-weight configs with a
byte-level BPE (the pipeline's fallback word heuristic) against HF's model (per-token logits of texts packed into one
batch, every CPU backend) and transformers' token-classification pipeline (entities of every aggregation strategy,
long texts in stride windows); bf16 within a measured bound."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, XLMRobertaConfig, XLMRobertaForTokenClassification, pipeline

from conftest import CPU_BACKENDS
from wde_core import Engine
from wde_plugin_kit import save_random_model

MODEL_CLASS = XLMRobertaForTokenClassification
# bf16 against fp32 HF, measured on the four families' random configs (weights of std 0.3, logits up to 10):
# the largest difference <= 8% of the largest logit, <= 1.65x HF's own bf16 model's; bound at 10% and 2x
BF16_OF_LARGEST_LOGIT, BF16_OF_HF_BF16 = 0.1, 2.0
LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
CONFIGS = {
    "small": dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=128,
                  max_position_embeddings=42),
    "odd": dict(hidden_size=96, num_attention_heads=3, num_hidden_layers=3, intermediate_size=200,
                max_position_embeddings=39, hidden_act="gelu_new", layer_norm_eps=1e-5),
}


def save_token_classifier(directory, case: str, *, seed: int = 0):
    """A random ``XLMRobertaForTokenClassification`` (weights of std 0.3) with the kit's byte-level BPE (<pad> = 1,
    XLM-R's padding index)."""
    config = XLMRobertaConfig(initializer_range=0.3, id2label=dict(enumerate(LABELS)), type_vocab_size=1,
                              label2id={label: i for i, label in enumerate(LABELS)}, pad_token_id=1, bos_token_id=0,
                              eos_token_id=2, **CONFIGS[case])
    config.architectures = ["XLMRobertaForTokenClassification"]
    return save_random_model(directory, config, model_class=XLMRobertaForTokenClassification, seed=seed,
                             tokenizer="bpe")


TOL = 1e-4
STRATEGIES = ("none", "simple", "first", "average", "max")
TEXTS = ["My name is Sarah and I live in London.", "The quick brown foxes jumped over the lazy dogs!", "a",
         "Zürich's  naïve café-owners (xqzv) were walking, talking; and   RUNNING.",
         "Paris is the capital and largest city of France, with about two million people."]
LONG = 2 * ("People ask questions; the system finds documents that answer them. What is the capital of France? "
            "Paris is the capital and largest city of France. They were walking in the park when the children "
            "started playing with the ball. Learning, running, testing and building are things engineers do. ")


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def case(request, tmp_path_factory):
    """A saved random token classifier, our engine, HF's model and transformers' pipeline over the same files
    (its tokenizer's ``model_max_length``, which sets its windows, is the engine's ``max_model_len``)."""
    directory = save_token_classifier(tmp_path_factory.mktemp(request.param), request.param, seed=4)
    engine = Engine(str(directory), device="cpu")
    reference = MODEL_CLASS.from_pretrained(directory, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(directory, model_max_length=engine.pipeline.settings.max_model_len)
    return engine, reference, pipeline("token-classification", model=reference, tokenizer=tokenizer)


def reference_logits(reference, tokenizer, texts) -> list[np.ndarray]:
    """HF's logits of each text, tokenized as the pipeline does (cut at the tokenizer's ``model_max_length``)."""
    out = []
    for text in texts:
        with torch.no_grad():
            out.append(reference(**tokenizer(text, truncation=True, return_tensors="pt")).logits[0].float().numpy())
    return out


def assert_same_entities(ours, theirs) -> None:
    """Groups, labels, words and spans identical; scores within ``TOL``."""
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert [{k: v for k, v in e.items() if k != "score"} for e in a] == \
               [{k: v for k, v in e.items() if k != "score"} for e in b]
        assert np.abs(np.array([e["score"] for e in a]) - np.array([e["score"] for e in b])).max(initial=0) <= TOL


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_per_token_logits_match_hf_on_a_packed_batch(case, backend):
    engine, reference, ner = case
    engine = Engine(str(engine.pipeline.model.path), device="cpu", attention_backend=backend)
    records = engine.classify_tokens(TEXTS + [LONG], truncate=True)  # one packed batch of mixed lengths
    expected = reference_logits(reference, ner.tokenizer, TEXTS + [LONG])
    assert records[-1]["logits"].shape[0] == engine.pipeline.settings.max_model_len  # the long text was cut
    for record, theirs in zip(records, expected):
        assert record["logits"].dtype == np.float32 and record["logits"].shape == theirs.shape
        assert theirs.shape[1] == len(LABELS) and np.abs(record["logits"] - theirs).max() <= TOL
        assert record["labels"] == [LABELS[i] for i in theirs.argmax(-1)]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_entities_match_the_pipeline(case, strategy):
    engine, _, ner = case
    ours = engine.classify_tokens(TEXTS, aggregation=strategy)
    theirs = ner(TEXTS, aggregation_strategy=strategy)
    assert sum(len(entities) for entities in theirs) >= 5  # random weights label many tokens other than O
    assert_same_entities(ours, theirs)
    assert_same_entities(engine.classify_tokens(TEXTS, aggregation=strategy, ignore_labels=[]),
                         ner(TEXTS, aggregation_strategy=strategy, ignore_labels=[]))


@pytest.mark.parametrize("stride", [0, 6, 20])
@pytest.mark.parametrize("strategy", ["simple", "first", "average", "max"])
def test_long_texts_in_stride_windows_match_the_pipeline(case, strategy, stride):
    engine, _, ner = case
    texts = [LONG, TEXTS[0], LONG + " " + TEXTS[3]]
    ours = engine.classify_tokens(texts, aggregation=strategy, stride=stride)
    theirs = ner(texts, aggregation_strategy=strategy, stride=stride)
    assert len(ner.tokenizer(LONG)["input_ids"]) > 2 * engine.pipeline.settings.max_model_len  # 3 windows or more
    assert_same_entities(ours, theirs)
    every = engine.classify_tokens(texts, aggregation=strategy, stride=stride, ignore_labels=[])
    assert max(e["end"] for e in every[0]) > len(LONG) - 60  # every window's tokens, to the end of the text
    assert_same_entities(every, ner(texts, aggregation_strategy=strategy, stride=stride, ignore_labels=[]))


def test_bf16_logits_within_the_measured_bound(case):
    engine, reference, ner = case
    path = engine.pipeline.model.path
    records = Engine(str(path), device="cpu", dtype="bfloat16").classify_tokens(TEXTS + [LONG], truncate=True)
    hf_bf16 = MODEL_CLASS.from_pretrained(path, attn_implementation="eager", dtype=torch.bfloat16).eval()
    expected = reference_logits(reference, ner.tokenizer, TEXTS + [LONG])
    theirs = reference_logits(hf_bf16, ner.tokenizer, TEXTS + [LONG])
    ours_error = max(np.abs(r["logits"] - e).max() for r, e in zip(records, expected))
    hf_error = max(np.abs(t - e).max() for t, e in zip(theirs, expected))
    largest = max(np.abs(e).max() for e in expected)
    print(f"bf16 logits: max abs difference {ours_error:.3f} from fp32 HF (HF bf16: {hf_error:.3f}; largest {largest:.2f})")
    assert records[0]["logits"].dtype == np.float32 and 0 < ours_error <= BF16_OF_LARGEST_LOGIT * largest
    assert ours_error <= BF16_OF_HF_BF16 * hf_error


def test_roberta_token_classifier_matches_hf_and_the_pipeline(tmp_path):
    """``RobertaForTokenClassification``, registered beside XLM-R's: logits and entities as HF's model and pipeline."""
    from transformers import RobertaConfig, RobertaForTokenClassification

    config = RobertaConfig(initializer_range=0.3, id2label=dict(enumerate(LABELS)), type_vocab_size=1,
                           label2id={label: i for i, label in enumerate(LABELS)}, pad_token_id=1, bos_token_id=0,
                           eos_token_id=2, **CONFIGS["small"])
    config.architectures = ["RobertaForTokenClassification"]
    directory = save_random_model(tmp_path / "roberta", config, model_class=RobertaForTokenClassification, seed=5,
                                  tokenizer="bpe")
    engine = Engine(str(directory), device="cpu")
    reference = RobertaForTokenClassification.from_pretrained(directory, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(directory, model_max_length=engine.pipeline.settings.max_model_len)
    ner = pipeline("token-classification", model=reference, tokenizer=tokenizer)
    records = engine.classify_tokens(TEXTS)
    for record, logits in zip(records, reference_logits(reference, ner.tokenizer, TEXTS), strict=True):
        assert np.abs(record["logits"] - logits).max() <= TOL
    for strategy in ("simple", "max"):
        assert_same_entities(engine.classify_tokens(TEXTS, aggregation=strategy),
                             ner(TEXTS, aggregation_strategy=strategy))
