"""``wde classify-tokens`` on a random ``BertForTokenClassification``: entities against transformers'
token-classification pipeline (arguments, a .jsonl file with ids, stride windows, ignored labels), every token
against HF's tokenizer and model (``--aggregation tokens --logits``), and one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from transformers import AutoTokenizer, BertForTokenClassification, pipeline

from wde_core.cli.main import cli
from wde_plugin_kit.token_classification import save_tiny_ner

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
TEXTS = ["My name is Sarah and I live in London.", "The quick brown foxes jumped over the lazy dogs!"]
LONG = "People ask questions; the system finds documents that answer them. " * 4


@pytest.fixture(scope="module")
def ner_dir(tmp_path_factory):
    """A random ``BertForTokenClassification`` (weights of std 0.3) with the kit's WordPiece, 32 positions."""
    return save_tiny_ner(tmp_path_factory.mktemp("ner"), LABELS, max_positions=32, seed=3)


@pytest.fixture(scope="module")
def reference(ner_dir):
    """HF's model and transformers' token-classification pipeline on the same files."""
    model = BertForTokenClassification.from_pretrained(ner_dir, attn_implementation="eager").eval()
    return model, pipeline("token-classification", model=model, tokenizer=AutoTokenizer.from_pretrained(ner_dir))


@pytest.fixture
def wde(isolated_host):
    """Run ``wde ARGS...`` in process on a fresh host."""
    isolated_host.register_commands(cli)
    return lambda *args, stdin=None: CliRunner().invoke(cli, [str(a) for a in args], input=stdin)


def run(wde, model, *args):
    result = wde("classify-tokens", "-m", model, "--device", "cpu", *args)
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


def assert_same_entities(ours, theirs) -> None:
    assert [[{k: v for k, v in e.items() if k != "score"} for e in x] for x in ours] == \
           [[{k: v for k, v in e.items() if k != "score"} for e in x] for x in theirs]
    assert np.allclose([e["score"] for x in ours for e in x], [e["score"] for x in theirs for e in x], atol=1e-4)


def test_entities_of_arguments_match_the_pipeline(wde, ner_dir, reference):
    _, ner = reference
    records = [json.loads(line) for line in run(wde, ner_dir, *TEXTS).splitlines()]
    assert [set(r) for r in records] == [{"entities"}] * 2
    theirs = ner(TEXTS, aggregation_strategy="simple")
    assert sum(map(len, theirs)) >= 3
    assert_same_entities([r["entities"] for r in records], theirs)
    ignored = run(wde, ner_dir, "--aggregation", "first", "--ignore-label", "O", "--ignore-label", "B-PER", *TEXTS)
    assert_same_entities([json.loads(line)["entities"] for line in ignored.splitlines()],
                         ner(TEXTS, aggregation_strategy="first", ignore_labels=["O", "B-PER"]))


def test_a_jsonl_file_with_ids_in_stride_windows(wde, ner_dir, reference, tmp_path):
    _, ner = reference
    source, out = tmp_path / "in.jsonl", tmp_path / "out.json"
    source.write_text("".join(json.dumps({"id": f"t{i}", "text": t}) + "\n" for i, t in enumerate([LONG, *TEXTS])))
    assert run(wde, ner_dir, "-i", source, "--stride", 5, "--aggregation", "max", "-o", out) == ""
    records = json.loads(out.read_text())
    assert [r["id"] for r in records] == ["t0", "t1", "t2"]
    theirs = ner([LONG, *TEXTS], aggregation_strategy="max", stride=5)
    assert max(e["end"] for e in theirs[0]) > 200  # past the 32 tokens of one window
    assert_same_entities([r["entities"] for r in records], theirs)


def test_every_token_with_its_logits(wde, ner_dir, reference):
    model, ner = reference
    records = [json.loads(line) for line in run(wde, ner_dir, "--aggregation", "tokens", "--logits", *TEXTS)
               .splitlines()]
    for text, record in zip(TEXTS, records):
        encoded = ner.tokenizer(text, return_offsets_mapping=True)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([encoded["input_ids"]])).logits[0]
        assert record["tokens"] == ner.tokenizer.convert_ids_to_tokens(encoded["input_ids"])
        assert record["offsets"] == [list(span) for span in encoded["offset_mapping"]]
        assert record["labels"] == [LABELS[i] for i in logits.argmax(-1).tolist()]
        assert np.abs(np.array(record["logits"]) - logits.numpy()).max() <= 1e-4
        assert np.abs(np.array(record["scores"]) - torch.softmax(logits, -1).max(-1).values.numpy()).max() <= 1e-5


@pytest.mark.parametrize("args, message", [
    (["--logits", "a"], "--logits needs --aggregation tokens"),
    (["--aggregation", "tokens", "--stride", "4", "a"], "--stride needs an --aggregation other than tokens and none"),
    (["-o", "out.npy", "a"], "wde classify-tokens writes .jsonl or .json, not .npy"),
    (["--aggregation", "simple", "--stride", "99", "a"], "stride=99: expected an integer from 0 to 29"),
])
def test_bad_options_are_one_line_errors(wde, ner_dir, args, message):
    result = wde("classify-tokens", "-m", ner_dir, "--device", "cpu", *args)
    assert result.exit_code in (1, 2) and "Traceback" not in result.output
    assert message in result.stderr.strip().splitlines()[-1]


def test_an_over_long_line_names_its_file_and_line(wde, ner_dir, tmp_path, monkeypatch):
    source = tmp_path / "in.txt"
    source.write_text(f"short\n{LONG}\n")
    result = wde("classify-tokens", "-m", ner_dir, "--device", "cpu", "-i", source, "--no-truncate")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.strip().splitlines()[-1].startswith(f"Error: {source} line 2: field 'text' has ")
    monkeypatch.delenv("WDE_DEFAULT_MODEL", raising=False)
    missing = wde("classify-tokens", "a")
    assert missing.exit_code == 1 and "needs a token-classification model (NER, PII)" in missing.stderr
