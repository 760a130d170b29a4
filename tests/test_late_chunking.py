"""Late chunking (``encode(truncate="late", chunks=...)``) against a reference built from transformers' token
states: HF ``BertModel``'s ``last_hidden_state`` of the whole document (or of its windows, each token from the
window where it has the most context), the mean over each chunk's tokens (a token belongs to the chunk whose
character span holds its start offset; special and prompt tokens to none), then the model's normalization."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, BertModel

from wde_core import AsyncEngine, Engine
from wde_core.tasks.late_chunking import late_chunk_spans, sentence_ends

TOL = 1e-5
DOC = ("Late chunking embeds the whole document first. Then it averages the token vectors of each chunk! "
       "Does every chunk keep the context of the others? It does, because attention saw everything.")
SPANS = [(0, 46), (47, 96), (97, 145), (146, len(DOC))]  # its sentences, without the whitespace between
SENTENCES = [(0, 46), (46, 96), (96, 145), (145, len(DOC))]  # the rule's: each takes the whitespace before it
OTHER = "A second document, short. With two sentences."
LONG = " ".join(f"Sentence number {i} talks about topic {i % 5} and ranking." for i in range(12))  # ~150 tokens


class Reference:
    """HF ``BertModel`` (eager attention, float64 means) and its fast tokenizer, read from a model directory."""

    def __init__(self, directory) -> None:
        self.tokenizer = AutoTokenizer.from_pretrained(directory)
        self.model = BertModel.from_pretrained(directory, attn_implementation="eager").eval()

    def states(self, ids: list[int]) -> np.ndarray:
        """``last_hidden_state`` of one sequence, float64."""
        with torch.no_grad():
            return self.model(torch.tensor([ids])).last_hidden_state[0].double().numpy()

    def document(self, text: str, max_len: int, overlap: int) -> tuple[np.ndarray, dict]:
        """Token states of ``text`` (whole, or from windows of ``max_len`` with ``overlap`` text tokens shared)."""
        encoded = self.tokenizer(text, return_offsets_mapping=True, return_special_tokens_mask=True)
        ids = encoded["input_ids"]
        if len(ids) <= max_len:
            return self.states(ids), encoded
        body, size = ids[1:-1], max_len - 2
        starts = list(range(0, len(body) - size, size - overlap)) + [len(body) - size]
        runs = [self.states([ids[0], *body[s:s + size], ids[-1]]) for s in starts]
        out = np.zeros((len(ids), runs[0].shape[1]))
        for p in range(len(body)):  # the window where the token's nearer edge is furthest; the first on a tie
            best, pick = -1.0, None
            for s, run in zip(starts, runs):
                if s <= p < s + size and min(p - s, s + size - 1 - p) > best:
                    best, pick = min(p - s, s + size - 1 - p), run[p - s + 1]
            out[p + 1] = pick
        return out, encoded

    def late(self, doc: str, spans, *, max_len: int = 512, overlap: int = 0, prompt: str = "",
             normalize: bool = True, dimensions: int | None = None) -> np.ndarray:
        """One vector per span: the mean of the states of the tokens whose start offset lies in it."""
        states, encoded = self.document(prompt + doc, max_len, overlap)
        starts = [a - len(prompt) for a, _ in encoded["offset_mapping"]]
        special = encoded["special_tokens_mask"]
        out = []
        for a, b in spans:
            rows = [i for i, s in enumerate(starts) if not special[i] and a <= s < b]
            out.append(self.finish(states[rows].mean(0), normalize, dimensions))
        return np.stack(out)

    def tokens(self, doc: str, n: int) -> np.ndarray:
        """``{"tokens": n}``: consecutive groups of ``n`` text tokens, then normalized."""
        states = self.states(self.tokenizer(doc)["input_ids"])[1:-1]
        return np.stack([self.finish(states[i:i + n].mean(0), True, None) for i in range(0, len(states), n)])

    @staticmethod
    def finish(vector: np.ndarray, normalize: bool, dimensions: int | None) -> np.ndarray:
        vector = vector[:dimensions] if dimensions else vector
        return vector / np.linalg.norm(vector) if normalize else vector


@pytest.fixture(scope="module")
def reference(tiny_st_bert_dir):
    return Reference(tiny_st_bert_dir)


@pytest.fixture(scope="module")
def engine(tiny_st_bert_dir):
    built = Engine(str(tiny_st_bert_dir), device="cpu")  # mean pooling, normalized, max_model_len 128
    yield built
    built.close()


@pytest.fixture(scope="module")
def short_engine(tiny_st_bert_dir):
    built = Engine(str(tiny_st_bert_dir), device="cpu", max_model_len=24)  # windows of 22 text tokens
    yield built
    built.close()


def gap(a, b) -> float:
    assert np.shape(a) == np.shape(b), (np.shape(a), np.shape(b))
    return float(np.abs(np.asarray(a, dtype=np.float64) - b).max())


def test_late_chunks_are_the_mean_of_each_spans_token_states(engine, reference):
    got = engine.encode(DOC, truncate="late", chunks=SPANS)
    assert got.dtype == np.float32 and got.shape == (4, 64)
    assert gap(got, reference.late(DOC, SPANS)) <= TOL
    # the context of the whole document is in every chunk: not the chunk embedded on its own
    alone = engine.encode([DOC[a:b] for a, b in SPANS])
    assert gap(got, alone) > 1e-2
    several = engine.encode([DOC, OTHER], truncate="late", chunks=[SPANS[:2], [(0, 25), (26, len(OTHER))]])
    assert isinstance(several, list) and [v.shape for v in several] == [(2, 64), (2, 64)]
    assert gap(several[0], reference.late(DOC, SPANS[:2])) <= TOL
    assert gap(several[1], reference.late(OTHER, [(0, 25), (26, len(OTHER))])) <= TOL
    overlapping = [(0, 96), (47, 145), (5, 13)]  # spans may overlap and leave text out
    assert gap(engine.encode(DOC, truncate="late", chunks=overlapping), reference.late(DOC, overlapping)) <= TOL
    raw = engine.encode(DOC, truncate="late", chunks=SPANS, normalize=False, dimensions=16)
    assert gap(raw, reference.late(DOC, SPANS, normalize=False, dimensions=16)) <= TOL
    cut = engine.encode(DOC, truncate="late", chunks=SPANS, dimensions=16)
    assert gap(cut, reference.late(DOC, SPANS, dimensions=16)) <= TOL


def test_a_prompt_runs_with_the_document_and_is_no_chunks_token(engine, reference):
    got = engine.encode(DOC, truncate="late", chunks=SPANS, prompt="passage: ")
    assert gap(got, reference.late(DOC, SPANS, prompt="passage: ")) <= TOL
    assert gap(got, reference.late(DOC, SPANS)) > 1e-3  # the prompt's tokens were attended to


def test_rules_cut_sentences_and_token_counts(engine, reference):
    assert late_chunk_spans(engine, DOC, "sentences") == SENTENCES
    by_rule = engine.encode(DOC, truncate="late", chunks="sentences")
    assert gap(by_rule, reference.late(DOC, SENTENCES)) <= TOL
    assert gap(by_rule, engine.encode(DOC, truncate="late", chunks=SPANS)) <= 1e-6  # whitespace holds no token
    pairs = [(0, 96), (96, len(DOC))]
    assert late_chunk_spans(engine, DOC, {"sentences": 2}) == pairs
    assert gap(engine.encode(DOC, truncate="late", chunks={"sentences": 2}), reference.late(DOC, pairs)) <= TOL
    assert late_chunk_spans(engine, [DOC, OTHER], {"sentences": 3}) == [[(0, 145), (145, len(DOC))],
                                                                       [(0, len(OTHER))]]
    got = engine.encode(DOC, truncate="late", chunks={"tokens": 7})
    assert gap(got, reference.tokens(DOC, 7)) <= TOL
    spans = late_chunk_spans(engine, DOC, {"tokens": 7})
    assert len(spans) == len(got) and spans[0][0] == 0 and spans[-1][1] == len(DOC)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))  # a partition of the text


def test_the_sentence_rule():
    text = 'He said "stop." Then left!  Really? Yes... 3.5 is a number. 终于。好的！ tail without end'
    ends = sentence_ends(text)
    assert [text[a:b] for a, b in zip([0, *ends], ends)] == [
        'He said "stop."', " Then left!", "  Really?", " Yes...", " 3.5 is a number.", " 终于。", "好的！"]
    assert sentence_ends("One. Two.   ") == [4]  # trailing whitespace stays with the last sentence
    assert sentence_ends("no terminator") == []


def test_a_document_longer_than_the_model_runs_in_windows(short_engine, engine, reference):
    spans = late_chunk_spans(short_engine, LONG, "sentences")
    assert len(spans) == 12 and len(reference.tokenizer(LONG)["input_ids"]) > 5 * 24
    got = short_engine.encode(LONG, truncate="late", chunks="sentences")  # default overlap: 22 // 4 = 5
    assert gap(got, reference.late(LONG, spans, max_len=24, overlap=5)) <= TOL
    for overlap in (0, 11, 21):
        windowed = short_engine.encode(LONG, truncate="late", chunks=spans, late_overlap=overlap)
        assert gap(windowed, reference.late(LONG, spans, max_len=24, overlap=overlap)) <= TOL
    whole = engine.encode(LONG, truncate="late", chunks=spans)  # 128 positions: one pass
    assert gap(whole, reference.late(LONG, spans)) <= TOL
    assert gap(whole, got) > 1e-3  # the windows changed what each token saw
    mixed = short_engine.encode([OTHER, LONG], truncate="late", chunks="sentences", late_overlap=8)
    assert gap(mixed[0], reference.late(OTHER, late_chunk_spans(engine, OTHER, "sentences"))) <= TOL
    assert gap(mixed[1], reference.late(LONG, spans, max_len=24, overlap=8)) <= TOL


def test_async_engine_serves_late_chunking(tiny_st_bert_dir, short_engine):
    async def run():
        engine = AsyncEngine(str(tiny_st_bert_dir), device="cpu", max_model_len=24)
        try:
            return await engine.encode([LONG, DOC], truncate="late", chunks="sentences")
        finally:
            await engine.close()

    expected = short_engine.encode([LONG, DOC], truncate="late", chunks="sentences")
    assert all(gap(a, b) <= 1e-6 for a, b in zip(asyncio.run(run()), expected))


@pytest.mark.parametrize("kwargs, error", [
    (dict(truncate="late"), r"chunks=None: expected \(start, end\) spans, 'sentences'"),
    (dict(chunks=SPANS), r"chunks and late_overlap serve truncate='late' .*got truncate=None"),
    (dict(truncate="late", chunks=SPANS, output="sparse"), r"output='sparse': model .* serves 'dense' only"),
    (dict(truncate="late", chunks=SPANS, output=("dense",)), r"with output='dense' only"),
    (dict(truncate="lat", chunks=SPANS), r"truncate='lat': expected True, False, 'chunk', 'late' or None"),
    (dict(truncate="late", chunks="paragraphs"), r"chunks='paragraphs': expected \(start, end\) spans"),
    (dict(truncate="late", chunks={"sentences": 0}), r"'sentences' takes a positive integer"),
    (dict(truncate="late", chunks={"words": 3}), r"chunks=\{'words': 3\}: expected"),
    (dict(truncate="late", chunks=[]), r"chunks: expected a non-empty list of \(start, end\) spans"),
    (dict(truncate="late", chunks=[(0, 5), (5,)]), r"chunks\[1\]=\(5,\): expected a \(start, end\) pair"),
    (dict(truncate="late", chunks=[(0, 5.0)]), r"chunks\[0\]=\(0, 5.0\): expected a \(start, end\) pair"),
    (dict(truncate="late", chunks=[(3, 3)]), r"chunks\[0\]=\(3, 3\): expected 0 <= start < end <= 188"),
    (dict(truncate="late", chunks=[(0, 999)]), r"chunks\[0\]=\(0, 999\): expected 0 <= start < end <= 188"),
    (dict(truncate="late", chunks=[(0, 46), (46, 47)]),
     r"chunks: input 0, chunk 1 \(characters 46 to 47\) holds no token's start"),
    (dict(truncate="late", chunks=SPANS, late_overlap=-1), r"late_overlap=-1: expected an integer from 0 to 125"),
    (dict(truncate="late", chunks=SPANS, late_overlap=126), r"late_overlap=126: expected an integer from 0 to 125"),
    (dict(truncate="late", chunks=SPANS, dimensions=0), r"dimensions=0: expected a positive integer"),
])
def test_bad_input_is_refused_naming_it(engine, kwargs, error):
    with pytest.raises(ValueError, match=error):
        engine.encode(DOC, **kwargs)


def test_bad_inputs_of_several_documents(engine):
    with pytest.raises(ValueError, match=r"chunks: 1 span lists for 2 inputs"):
        engine.encode([DOC, OTHER], truncate="late", chunks=[SPANS])
    with pytest.raises(ValueError, match=r"chunks\[1\]\[0\]=\(0, 99\): expected 0 <= start < end <= 45"):
        engine.encode([DOC, OTHER], truncate="late", chunks=[SPANS, [(0, 99)]])
    with pytest.raises(ValueError, match=r"chunks: input 1, chunk 0 \(characters 0 to 0\) holds no token"):
        engine.encode([DOC, ""], truncate="late", chunks="sentences")
    with pytest.raises(TypeError, match="input 1: field 'text' must be a str"):
        engine.encode([DOC, 5], truncate="late", chunks="sentences")


def test_a_model_with_dense_modules_is_refused(tmp_path):
    from sentence_transformers.sentence_transformer.modules import Dense

    from test_st_modules import _save_st_model

    path, _ = _save_st_model(tmp_path, lambda h: [Dense(h, 24, activation_function=None)])
    with Engine(str(path), device="cpu") as engine:
        with pytest.raises(ValueError, match=r"applies Dense modules after pooling; late chunking averages token"):
            engine.encode(DOC, truncate="late", chunks="sentences")
