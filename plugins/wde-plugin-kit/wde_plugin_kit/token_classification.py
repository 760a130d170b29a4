"""The checks every token-classification family runs against transformers: a family's test module saves its random
``*ForTokenClassification`` configs, builds a :func:`token_classifier_case` per config, and calls these checks
(per-token logits of a packed batch on an attention backend, the pipeline's entities for every aggregation
strategy, long texts in stride windows, bf16 within the measured bound)."""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np

TOL = 1e-4
# bf16 against fp32 HF, measured on the four families' random configs (weights of std 0.3, logits up to 10):
# the largest difference <= 8% of the largest logit, <= 1.65x HF's own bf16 model's; bound at 10% and 2x
BF16_OF_LARGEST_LOGIT, BF16_OF_HF_BF16 = 0.1, 2.0
LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
STRATEGIES = ("none", "simple", "first", "average", "max")
TEXTS = ["My name is Sarah and I live in London.", "The quick brown foxes jumped over the lazy dogs!", "a",
         "Zürich's  naïve café-owners (xqzv) were walking, talking; and   RUNNING.",
         "Paris is the capital and largest city of France, with about two million people."]
LONG = 2 * ("People ask questions; the system finds documents that answer them. What is the capital of France? "
            "Paris is the capital and largest city of France. They were walking in the park when the children "
            "started playing with the ball. Learning, running, testing and building are things engineers do. ")


class TokenClassifierCase(NamedTuple):
    """wde's engine, HF's model (eager, fp32) and transformers' pipeline over one saved token classifier."""

    engine: Any
    reference: Any
    ner: Any


def label_maps(labels: Sequence[str] = LABELS) -> dict[str, dict]:
    """``id2label`` and ``label2id`` for a config."""
    return {"id2label": dict(enumerate(labels)), "label2id": {label: i for i, label in enumerate(labels)}}


def save_tiny_ner(directory, labels: Sequence[str], *, max_positions: int = 40, seed: int = 2):
    """A tiny random ``BertForTokenClassification`` (2 layers of 32, weights of std 0.3 so labels spread) with the
    kit's WordPiece, saved to ``directory``."""
    from transformers import BertConfig, BertForTokenClassification

    from wde_plugin_kit.models import save_random_model

    config = BertConfig(hidden_size=32, num_attention_heads=2, num_hidden_layers=2, intermediate_size=64,
                        max_position_embeddings=max_positions, initializer_range=0.3, **label_maps(labels))
    config.architectures = ["BertForTokenClassification"]
    return save_random_model(directory, config, model_class=BertForTokenClassification, seed=seed)


def token_classifier_case(directory, model_class) -> TokenClassifierCase:
    """The engine, HF's model and the pipeline over ``directory`` (the pipeline tokenizer's ``model_max_length``,
    which sets its windows, is the engine's ``max_model_len``)."""
    from transformers import AutoTokenizer, pipeline

    from wde_core.plugin_api import Engine

    engine = Engine(str(directory), device="cpu")
    reference = model_class.from_pretrained(directory, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(directory, model_max_length=engine.pipeline.settings.max_model_len)
    return TokenClassifierCase(engine, reference, pipeline("token-classification", model=reference,
                                                           tokenizer=tokenizer))


def reference_logits(reference, tokenizer, texts) -> list[np.ndarray]:
    """HF's logits of each text, tokenized as the pipeline does (cut at the tokenizer's ``model_max_length``)."""
    import torch

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


def check_packed_logits(case: TokenClassifierCase, backend: str) -> None:
    """Per-token logits of texts packed into one batch (a long one cut) on ``backend`` equal HF's within ``TOL``."""
    from wde_core.plugin_api import Engine

    engine = Engine(str(case.engine.pipeline.model.path), device="cpu", attention_backend=backend)
    records = engine.classify_tokens(TEXTS + [LONG], truncate=True)  # one packed batch of mixed lengths
    expected = reference_logits(case.reference, case.ner.tokenizer, TEXTS + [LONG])
    assert records[-1]["logits"].shape[0] == engine.pipeline.settings.max_model_len  # the long text was cut
    for record, theirs in zip(records, expected):
        assert record["logits"].dtype == np.float32 and record["logits"].shape == theirs.shape
        assert theirs.shape[1] == len(LABELS) and np.abs(record["logits"] - theirs).max() <= TOL
        assert record["labels"] == [LABELS[i] for i in theirs.argmax(-1)]


def check_entities(case: TokenClassifierCase, strategy: str) -> None:
    """Entities of ``strategy`` as the pipeline's, with the default ``ignore_labels`` and with none ignored."""
    engine, ner = case.engine, case.ner
    ours = engine.classify_tokens(TEXTS, aggregation=strategy)
    theirs = ner(TEXTS, aggregation_strategy=strategy)
    assert sum(len(entities) for entities in theirs) >= 5  # random weights label many tokens other than O
    assert_same_entities(ours, theirs)
    assert_same_entities(engine.classify_tokens(TEXTS, aggregation=strategy, ignore_labels=[]),
                         ner(TEXTS, aggregation_strategy=strategy, ignore_labels=[]))


def check_stride_windows(case: TokenClassifierCase, strategy: str, stride: int) -> None:
    """Texts over three windows long, resolved as the pipeline's ``stride`` resolves them."""
    engine, ner = case.engine, case.ner
    texts = [LONG, TEXTS[0], LONG + " " + TEXTS[3]]
    ours = engine.classify_tokens(texts, aggregation=strategy, stride=stride)
    theirs = ner(texts, aggregation_strategy=strategy, stride=stride)
    assert len(ner.tokenizer(LONG)["input_ids"]) > 2 * engine.pipeline.settings.max_model_len  # 3 windows or more
    assert_same_entities(ours, theirs)
    every = engine.classify_tokens(texts, aggregation=strategy, stride=stride, ignore_labels=[])
    assert max(e["end"] for e in every[0]) > len(LONG) - 60  # every window's tokens, to the end of the text
    assert_same_entities(every, ner(texts, aggregation_strategy=strategy, stride=stride, ignore_labels=[]))


def check_bf16(case: TokenClassifierCase, model_class) -> None:
    """bf16 logits within ``BF16_OF_LARGEST_LOGIT`` of the largest fp32 logit and ``BF16_OF_HF_BF16`` times HF's
    own bf16 error."""
    import torch

    from wde_core.plugin_api import Engine

    path = case.engine.pipeline.model.path
    records = Engine(str(path), device="cpu", dtype="bfloat16").classify_tokens(TEXTS + [LONG], truncate=True)
    hf_bf16 = model_class.from_pretrained(path, attn_implementation="eager", dtype=torch.bfloat16).eval()
    expected = reference_logits(case.reference, case.ner.tokenizer, TEXTS + [LONG])
    theirs = reference_logits(hf_bf16, case.ner.tokenizer, TEXTS + [LONG])
    ours_error = max(np.abs(r["logits"] - e).max() for r, e in zip(records, expected))
    hf_error = max(np.abs(t - e).max() for t, e in zip(theirs, expected))
    largest = max(np.abs(e).max() for e in expected)
    print(f"bf16 logits: max abs difference {ours_error:.3f} from fp32 HF (HF bf16: {hf_error:.3f}; "
          f"largest {largest:.2f})")
    assert records[0]["logits"].dtype == np.float32 and 0 < ours_error <= BF16_OF_LARGEST_LOGIT * largest
    assert ours_error <= BF16_OF_HF_BF16 * hf_error
