"""The stages LLM rerankers share, on their own: pairs checked before any work (naming the item and field), the
shared-prefix mark, the variant matchers' names, the engine arguments' checks and the scores read per pair. The
rerankers' parity with their references is tested where each lives (wde-qwen2-bidir, wde-gemma, wde-qwen3-vl)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from wde_core.plugin_api import ScoreOptions
from wde_llm_rerank.public import mark_shared_prefixes, name_match, names_of
from wde_llm_rerank.stages import LlmRerankEngineArgs, PairInputProcessor, YesNoScoreOutputProcessor


def test_pairs_become_requests_and_bad_items_are_named():
    processor = PairInputProcessor(None)
    requests = processor.process([("q", "d1"), ["q", "d2"]])
    assert [(r.index, r.text) for r in requests] == [(0, ("q", "d1")), (1, ("q", "d2"))]
    with pytest.raises(TypeError, match=r"^input 1: expected a \(query, document\) pair, got str$"):
        processor.process([("q", "d"), "just a string"])
    with pytest.raises(TypeError, match=r"^input 0: field 'document' must be a str, got int$"):
        processor.process([("q", 3)])
    with pytest.raises(ValueError, match="takes no prompt; pass the engine argument instruction="):
        processor.process([("q", "d")], prompt="Query: ")
    with pytest.raises(ValueError, match="empty list"):
        processor.process([])


def test_pairs_of_one_query_share_their_prefix_unless_the_engine_argument_says_not():
    requests = PairInputProcessor(None).process([("q1", "a"), ("q2", "b"), ("q1", "c")])
    mark_shared_prefixes(requests, SimpleNamespace(args=SimpleNamespace(share_prefix=True)))
    assert [r.shared_prefix for r in requests] == ["q1", "q2", "q1"]
    fresh = PairInputProcessor(None).process([("q1", "a")])
    mark_shared_prefixes(fresh, SimpleNamespace(args=SimpleNamespace(share_prefix=False)))
    assert fresh[0].shared_prefix is None


def test_variant_matchers_read_the_id_the_path_and_the_saved_name(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"_name_or_path": "Org/Qwen3-Reranker-0.6B"}))
    directory = SimpleNamespace(name="my-model", path=tmp_path)
    assert names_of(directory) == ["my-model", str(tmp_path), "Org/Qwen3-Reranker-0.6B"]
    assert name_match(directory, "qwen3-reranker", "LLM yes/no reranker") == (
        "LLM yes/no reranker ('qwen3-reranker' in 'Org/Qwen3-Reranker-0.6B')")
    assert name_match(directory, "mxbai-rerank", "LLM 1/0 reranker") is None


def test_engine_arguments_are_checked():
    with pytest.raises(ValueError, match=r"engine argument instruction=3: expected a str or None"):
        LlmRerankEngineArgs(model="m", instruction=3)
    with pytest.raises(ValueError, match=r"engine argument share_prefix='no': expected True or False"):
        LlmRerankEngineArgs(model="m", share_prefix="no")


def test_scores_are_read_per_pair_raw_or_through_the_sigmoid():
    requests = PairInputProcessor(None).process([("q", "a"), ("q", "b")])
    requests[1].options = ScoreOptions(raw_scores=True)
    pooled = {"scores": torch.tensor([[0.25], [0.75]]), "logits": torch.tensor([[-1.0], [1.5]])}
    assert YesNoScoreOutputProcessor(None).process(requests, pooled) == [0.25, 1.5]
