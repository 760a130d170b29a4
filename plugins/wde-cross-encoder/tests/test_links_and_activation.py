"""wde-cross-encoder's links, variant matchers and score activation, on pipelines assembled from real HF
directories: the task follows the ``num_labels`` transformers derives from config.json; the activation is the one
sentence-transformers' ``CrossEncoder`` applies to a single logit (its ``activation_fn`` in config.json, sigmoid by
default) and the one transformers' text-classification pipeline applies to several labels (softmax; sigmoid for
``problem_type="multi_label_classification"``)."""

from __future__ import annotations

import pytest
import torch
from cross_encoder_pipelines import ARCHITECTURE, assemble, with_config
from transformers import AutoConfig, AutoTokenizer, BertConfig, BertForSequenceClassification, pipeline

from wde_cross_encoder.public import CHOOSE_ACTIVATION, cross_encoder_links, has_one_label, has_several_labels
from wde_plugin_kit.encoders import save_bert_classifier, write_tokenizer

TEXTS = ["A man is eating food.", "The giant panda is a bear native to China."]


@pytest.fixture(scope="module")
def one_label(tmp_path_factory):
    return save_bert_classifier(tmp_path_factory.mktemp("one-label"), seed=2)


@pytest.fixture(scope="module")
def three_labels(tmp_path_factory):
    return save_bert_classifier(tmp_path_factory.mktemp("three-labels"), num_labels=3, seed=3)


def test_cross_encoder_links_give_the_rerank_and_classify_variants():
    links = cross_encoder_links("FooForSequenceClassification", "wde_foo.model:Foo", "Foo {variant} for {task}",
                                defaults={"position_offset": 2})
    assert [(link.architecture, link.task, link.workflow, link.variant, link.model, link.description)
            for link in links] == [
        ("FooForSequenceClassification", "rerank", "rerank", "single-logit", "wde_foo.model:Foo",
         "Foo single-logit for rerank"),
        ("FooForSequenceClassification", "classify", "classify", "several-labels", "wde_foo.model:Foo",
         "Foo several-labels for classify")]
    assert [link.matches for link in links] == ["wde_cross_encoder.public:has_one_label",
                                                "wde_cross_encoder.public:has_several_labels"]
    assert all(link.defaults == {"pooling": "cls", "normalize": False, "position_offset": 2} for link in links)
    assert {link.configure for link in links} == {CHOOSE_ACTIVATION}
    own_step = cross_encoder_links("Foo", "m:Foo", "d", configure="wde_foo.settings:configure")
    assert {link.configure for link in own_step} == {"wde_foo.settings:configure"}


@pytest.mark.parametrize("config", [
    {"num_labels": 1}, {"num_labels": 1, "problem_type": "regression"}, {},  # transformers' default: 2 labels
    {"id2label": {0: "no", 1: "yes"}}, {"num_labels": 5}], ids=["one", "regression", "default", "id2label", "five"])
def test_the_task_follows_the_num_labels_transformers_reads(tmp_path, config):
    BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
               architectures=[ARCHITECTURE], **config).save_pretrained(tmp_path)
    write_tokenizer(tmp_path)
    labels = AutoConfig.from_pretrained(tmp_path).num_labels  # the reference: what transformers makes of config.json
    served = assemble(tmp_path)
    assert has_one_label(served.model) == ("num_labels == 1: a relevance score" if labels == 1 else None)
    assert has_several_labels(served.model) == (f"num_labels == {labels}: a classifier" if labels > 1 else None)
    task, variant, why = (("rerank", "single-logit", has_one_label(served.model)) if labels == 1 else
                          ("classify", "several-labels", has_several_labels(served.model)))
    assert (served.task, served.link.variant) == (task, variant)
    assert served.reasons["workflow"] == (f"{ARCHITECTURE} ({why}) is linked to {task!r} for task {task!r} by "
                                          "test-bert-classifiers")
    other = "classify" if task == "rerank" else "rerank"
    with pytest.raises(LookupError, match=rf"no installed plugin serves architecture {ARCHITECTURE} for task "
                                          rf"'{other}'; tasks served: {ARCHITECTURE} \(classify, rerank\)"):
        assemble(tmp_path, task=other)


ST_ACTIVATIONS = {"default": None, "sigmoid": "torch.nn.modules.activation.Sigmoid",
                  "identity": "torch.nn.modules.linear.Identity", "tanh": "torch.nn.modules.activation.Tanh"}


@pytest.mark.parametrize(("name", "key"), [("default", "sentence_transformers")] + [
    (name, key) for name in sorted(set(ST_ACTIVATIONS) - {"default"})
    for key in ("sentence_transformers", "sbert_ce_default_activation_function")])
def test_a_single_logit_takes_the_activation_of_sentence_transformers(one_label, tmp_path, name, key):
    from sentence_transformers import CrossEncoder

    path = ST_ACTIVATIONS[name]
    value = path if key == "sbert_ce_default_activation_function" or path is None else {"activation_fn": path}
    directory = with_config(one_label, tmp_path / name, **{key: value})
    reference = CrossEncoder(str(directory), device="cpu").activation_fn  # ST < 4 wrote the second key
    served = assemble(directory)
    assert served.settings.activation == type(reference).__name__.lower() == ("sigmoid" if path is None else name)
    why = served.reasons["activation"]
    assert why == (f"config.json sentence_transformers activation_fn {path}" if path else
                   "single logit: sigmoid (as sentence-transformers' CrossEncoder and TEI)")


def test_an_activation_wde_cannot_apply_is_refused_naming_it(one_label, tmp_path):
    directory = with_config(one_label, tmp_path / "relu",
                            sentence_transformers={"activation_fn": "torch.nn.modules.activation.ReLU"})
    with pytest.raises(ValueError, match=r"model '.*relu': unsupported score activation "
                                         r"'torch.nn.modules.activation.ReLU' in config.json; supported: Identity, "
                                         r"Sigmoid, Softmax, Tanh"):
        assemble(directory)


def hf_pipeline_activation(directory) -> str:
    """Which function transformers' text-classification pipeline applies to the model's logits."""
    classify = pipeline("text-classification", model=str(directory), device="cpu", top_k=None)
    model = BertForSequenceClassification.from_pretrained(directory).eval()
    with torch.no_grad():
        logits = model(**AutoTokenizer.from_pretrained(directory)(TEXTS, padding=True, return_tensors="pt")).logits
    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
    theirs = torch.tensor([[{r["label"]: r["score"] for r in row}[label] for label in labels]
                           for row in classify(TEXTS)])
    found = [name for name, fn in (("softmax", lambda x: torch.softmax(x, -1)), ("sigmoid", torch.sigmoid))
             if torch.allclose(theirs, fn(logits), atol=1e-5)]
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("problem_type", [None, "single_label_classification", "multi_label_classification"])
def test_several_labels_take_the_activation_of_transformers_pipeline(three_labels, tmp_path, problem_type):
    directory = with_config(three_labels, tmp_path / str(problem_type), problem_type=problem_type)
    served = assemble(directory)
    assert served.settings.activation == hf_pipeline_activation(directory)
    assert served.settings.activation == ("sigmoid" if problem_type == "multi_label_classification" else "softmax")
    assert served.reasons["activation"] == ("multi-label classifier: sigmoid per label"
                                            if problem_type == "multi_label_classification" else
                                            "softmax over labels")
