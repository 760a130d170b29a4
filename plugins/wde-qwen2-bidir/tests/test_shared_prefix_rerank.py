"""Shared-prefix reranking: pairs of one query hold their prompt's common leading tokens once per batch, and score
as the unshared path does (fp32 within 1e-5) on every CPU backend, Qwen3-Reranker and mxbai-rerank-v2 alike."""

from __future__ import annotations

import numpy as np
import pytest

from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.decoders import save_random_reranker
from wde_core import Engine
from wde_core.plugin_api import Request

QUERY = ("which animals live in the bamboo forests of central China, and what do they eat through the winter months "
         "when the snow covers the lower slopes?")
DOCUMENTS = ["The giant panda is a bear native to China.", "Paris is the capital of France.",
             "Red pandas eat bamboo leaves, fruit and eggs; in winter they move down the slopes.",
             "no", "Snow leopards hunt blue sheep on the high plateau. " * 6]
OTHER = "capital cities of Europe"


@pytest.fixture(scope="module", params=["qwen3", "mxbai"])
def reranker_dir(request, tmp_path_factory):
    """A random Qwen3-Reranker or mxbai-rerank-v2 directory (named so the variant matches)."""
    if request.param == "qwen3":
        return save_random_reranker(tmp_path_factory.mktemp("qwen3") / "Qwen3-Reranker-tiny", tied=False, seed=3)
    return save_random_reranker(tmp_path_factory.mktemp("mxbai") / "mxbai-rerank-tiny-v2", tied=True, seed=4,
                                family="Qwen2", answers=(), max_position_embeddings=512)


def pairs() -> list[tuple[str, str]]:
    """Two queries' documents, interleaved, and one pair alone."""
    both = [(q, d) for d in DOCUMENTS for q in (QUERY, OTHER)]
    return both + [("a lone query", "a lone document")]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_shared_scores_equal_unshared(reranker_dir, backend):
    with Engine(str(reranker_dir), task="rerank", attention_backend=backend) as shared, \
            Engine(str(reranker_dir), task="rerank", attention_backend=backend, share_prefix=False) as plain:
        got, expected = shared.score(pairs(), raw_scores=True), plain.score(pairs(), raw_scores=True)
        ranked, ranked_plain = shared.rerank(QUERY, DOCUMENTS), plain.rerank(QUERY, DOCUMENTS)
    diff = np.abs(np.asarray(got) - np.asarray(expected)).max()
    print(f"{reranker_dir.name} {backend}: shared vs unshared max abs diff {diff:.2e}")
    assert diff <= 1e-5
    assert np.ptp(expected) > 1e-3  # the scores differ from one another: the comparison can fail
    assert [r["index"] for r in ranked] == [r["index"] for r in ranked_plain]
    assert max(abs(a["score"] - b["score"]) for a, b in zip(ranked, ranked_plain)) <= 1e-5


def test_the_batch_holds_each_query_prefix_once(reranker_dir):
    with Engine(str(reranker_dir), task="rerank") as shared, \
            Engine(str(reranker_dir), task="rerank", share_prefix=False) as plain:
        packed = [engine_tokens(engine, pairs()) for engine in (shared, plain)]
        requests = prepared(plain, pairs())
    (shared_tokens, shared_positions), (plain_tokens, _) = packed
    by_query = {}
    for r in requests:
        by_query.setdefault(r.text[0], []).append(r.token_ids)
    saved = sum((len(ids) - 1) * common_prefix(ids) for ids in by_query.values() if len(ids) > 1)
    assert len(plain_tokens) == sum(r.num_tokens for r in requests)
    assert len(shared_tokens) == len(plain_tokens) - saved and saved > 0.2 * len(plain_tokens)
    assert int(shared_positions.max()) == max(r.num_tokens for r in requests) - 1  # positions continue the prefix


def test_share_prefix_is_validated(reranker_dir):
    with pytest.raises(ValueError, match="engine argument share_prefix='yes': expected True or False"):
        Engine(str(reranker_dir), task="rerank", share_prefix="yes")


def prepared(engine, items) -> list[Request]:
    """The requests as the engine's input processor and tokenizer make them."""
    requests = engine.input_processor.process(items)
    engine.tokenizer.tokenize(requests)
    return requests


def engine_tokens(engine, items):
    """The packed token ids and positions of ``items`` in one batch (without the CPU padding rows)."""
    model_input = engine.builder.build(prepared(engine, items))
    tokens = int(model_input.cu_seqlens[-1])
    return model_input.input_ids[:tokens], model_input.positions[:tokens]


def common_prefix(token_lists: list[list[int]]) -> int:
    """Tokens all of ``token_lists`` begin with."""
    n = 0
    while all(len(ids) > n + 1 and ids[n] == token_lists[0][n] for ids in token_lists):
        n += 1
    return n
