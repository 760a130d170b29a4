"""Late chunking (Jina's "chunked pooling"): ``encode(docs, truncate="late", chunks=...)`` runs each whole document
through the model, then returns the mean of each chunk's token states, one vector per chunk.

The rule, precisely: a token belongs to every chunk whose character span ``[start, end)`` (of the document, without
a prompt) holds the token's start offset (the fast tokenizer's offset mapping); special tokens and a prompt's tokens
belong to none (Jina's reference, ``chunked_pooling``, also averages ``[CLS]`` into the first chunk and ``[SEP]``
into the last; wde pools every chunk alike). A chunk that holds no token is an error naming it. Each chunk is the
plain mean of its tokens' last hidden states, whatever the model's pooling (as Jina's), computed in float64, then
cut to ``dimensions`` and normalized as ``encode`` does. Models with sentence-transformers ``Dense`` modules after
pooling are refused.

``chunks`` per document: a list of ``(start, end)`` spans (a list of such lists for a list of documents), or a rule:
``"sentences"`` (``{"sentences": k}``: k sentences a chunk) or ``{"tokens": n}`` (n text tokens a chunk). Rules
partition the document: a sentence ends after a run of ``.``, ``!`` or ``?`` (and closing quotes or brackets) that
whitespace follows, or after ``。``, ``！`` or ``？``, and takes the whitespace before it (a plain regular expression,
no language model: ``Dr. Smith`` is two sentences); ``{"tokens": n}`` cuts before every n-th text token.

A document longer than ``max_model_len`` runs in overlapping windows of its text tokens, each wrapped in the special
tokens a text gets, neighbours sharing ``late_overlap`` tokens (default: a quarter of a window; the last window ends
at the document's end). Each token's state comes from the window where it has the most context: the one whose
nearer edge is furthest from the token, the earlier window on a tie (not counting the document's own start and end
as edges would pick the same windows).
"""

from __future__ import annotations

import dataclasses
import re
from numbers import Integral
from typing import Any, Sequence

import numpy as np

from wde_core.stages.output import finish_for_request
from wde_core.stages.request import EmbedOptions, InputTypeError, InputValueError, Request, TokenEmbedOptions
from wde_core.tasks import Call

RULES = ("sentences", "tokens")
SENTENCE_END = re.compile(r"[.!?]+[\"')\]\u2019\u201d]*(?=\s)|[\u3002\uff01\uff1f]+[\u300d\u300f\u2019\u201d\uff09]*")


def is_count(value: Any) -> bool:
    """Whether ``value`` is an integer (a bool is not)."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def sentence_ends(text: str) -> list[int]:
    """Where each sentence of ``text`` ends, but the last (see the module docstring for the rule)."""
    return [m.end() for m in SENTENCE_END.finditer(text) if text[m.end():].strip()]


def check_chunks(chunks: Any, docs: list[str], single: bool, name: str) -> list:
    """Per document, its spans as ``(start, end)`` tuples or its rule as ``(rule, size)``; refuses a bad ``chunks``."""
    if isinstance(chunks, str) and chunks == "sentences":
        return [("sentences", 1)] * len(docs)
    if isinstance(chunks, dict) and len(chunks) == 1 and next(iter(chunks)) in RULES:
        (rule, size), = chunks.items()
        if not is_count(size) or size < 1:
            raise ValueError(f"{name}={chunks!r}: {rule!r} takes a positive integer")
        return [(rule, int(size))] * len(docs)
    if isinstance(chunks, (str, dict)) or not isinstance(chunks, (list, tuple)):
        raise ValueError(f"{name}={chunks!r}: expected (start, end) spans, 'sentences', {{'sentences': k}} or "
                         "{'tokens': n}")
    per_doc = [chunks] if single else list(chunks)
    if len(per_doc) != len(docs):
        raise ValueError(f"{name}: {len(per_doc)} span lists for {len(docs)} inputs; pass one list of "
                         "(start, end) spans per input")
    return [check_spans(spans, doc, name if single else f"{name}[{d}]") for d, (spans, doc) in
            enumerate(zip(per_doc, docs))]


def check_spans(spans: Any, doc: str, where: str) -> list[tuple[int, int]]:
    """One document's spans as ``(start, end)`` tuples of character offsets, each checked against ``doc``."""
    if not isinstance(spans, (list, tuple)) or not spans:
        raise ValueError(f"{where}: expected a non-empty list of (start, end) spans, got {spans!r}")
    for j, span in enumerate(spans):
        if not isinstance(span, (list, tuple)) or len(span) != 2 or not all(map(is_count, span)):
            raise ValueError(f"{where}[{j}]={span!r}: expected a (start, end) pair of character offsets")
        if not 0 <= span[0] < span[1] <= len(doc):
            raise ValueError(f"{where}[{j}]=({span[0]}, {span[1]}): expected 0 <= start < end <= {len(doc)}, "
                             "the input's length in characters")
    return [(int(a), int(b)) for a, b in spans]


def rule_spans(rule: tuple[str, int], doc: str, starts: np.ndarray) -> list[tuple[int, int]]:
    """The spans a rule cuts ``doc`` into (``starts``: its text tokens' start offsets)."""
    kind, size = rule
    cuts = sentence_ends(doc)[size - 1::size] if kind == "sentences" else starts[size::size].tolist()
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(doc)}), len(doc)]
    return list(zip(bounds[:-1], bounds[1:]))


def text_tokens(context, requests: list[Request]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per request: the positions of its text tokens (no special or prompt token) and their start offsets in the
    document, from the tokenizer stage's fast tokenizer (its ids checked against the request's)."""
    fast = getattr(context.tokenizer, "tokenizer", None)
    if not getattr(fast, "is_fast", False):
        raise ValueError("truncate='late' needs the offsets of a fast tokenizer; this tokenizer stage has none")
    encoded = fast([r.text for r in requests], add_special_tokens=True, return_offsets_mapping=True,
                   return_special_tokens_mask=True, return_attention_mask=False, verbose=False)
    out = []
    for i, request in enumerate(requests):
        if list(encoded["input_ids"][i]) != list(request.token_ids):
            raise InputValueError(i, f"truncate='late' needs the tokenizer stage's token ids to be its fast "
                             "tokenizer's; they differ")
        starts = np.array([a for a, _ in encoded["offset_mapping"][i]], dtype=np.int64) - len(request.prompt or "")
        keep = np.flatnonzero((np.array(encoded["special_tokens_mask"][i]) == 0) & (starts >= 0))
        out.append((keep, starts[keep]))
    return out


def resolve(context, texts: str | Sequence[str], chunks: Any, *, options: Any, prompt: str | None,
            prompt_name: str | None, name: str) -> tuple[list[Request], list[list[tuple[int, int]]], list]:
    """Validate and tokenize (whole) a late-chunking call: its requests, each document's spans, and each chunk's
    token positions; every error (a chunk with no token too) is raised here, before any work."""
    single = isinstance(texts, str)
    requests = context.input_processor.process(texts, prompt=prompt, prompt_name=prompt_name, options=options)
    bad = next((r.index for r in requests if not isinstance(r.text, str)), None)
    if bad is not None:
        raise InputTypeError(bad, "truncate='late' reads text only")
    docs = [r.text[len(r.prompt or ""):] for r in requests]
    specs = check_chunks(chunks, docs, single, name)
    if context.pipeline.model.st.dense:
        raise ValueError(f"truncate='late': model {context.pipeline.model.name!r} applies Dense modules after "
                         "pooling; late chunking averages token states and serves models without them")
    context.tokenizer.tokenize(requests, truncate="chunk")
    spans, members = [], []
    for d, (spec, (positions, starts)) in enumerate(zip(specs, text_tokens(context, requests))):
        spans.append(spec if isinstance(spec, list) else rule_spans(spec, docs[d], starts))
        members.append([positions[(starts >= a) & (starts < b)] for a, b in spans[-1]])
        empty = next((j for j, m in enumerate(members[-1]) if m.size == 0), None)
        if empty is not None:
            raise ValueError(f"{name}: input {d}, chunk {empty} (characters {spans[-1][empty][0]} to "
                             f"{spans[-1][empty][1]}) holds no token's start; widen or drop it")
    return requests, spans, members


def late_chunk_spans(context, texts: str | Sequence[str], chunks: Any, *, prompt: str | None = None,
                     prompt_name: str | None = None, name: str = "chunks") -> list:
    """The ``(start, end)`` character spans ``encode(texts, truncate="late", chunks=chunks)`` pools, one list per
    document (one list for a single string): how a rule cut each document. Errors name ``name``."""
    _, spans, _ = resolve(context, texts, chunks, options=EmbedOptions(), prompt=prompt, prompt_name=prompt_name,
                          name=name)
    return spans[0] if isinstance(texts, str) else spans


@dataclasses.dataclass
class Windows:
    """How one document's token states come from its window requests: the first window's index, each window's
    start in the document's text tokens, the window each text token is taken from (empty: the document ran
    whole), and how many special tokens wrap a window."""

    first: int
    starts: list[int]
    source: np.ndarray
    affixes: tuple[int, int] = (0, 0)


def plan_windows(n_body: int, size: int, overlap: int) -> tuple[list[int], np.ndarray]:
    """Window starts over ``n_body`` text tokens (``size`` a window, ``overlap`` shared), and for each token the
    window where its nearer edge is furthest, the earlier on a tie."""
    starts = [*range(0, n_body - size, size - overlap), n_body - size]
    best, source = np.full(n_body, -1), np.zeros(n_body, dtype=np.int64)
    for k, s in enumerate(starts):
        inside = np.arange(s, s + size)
        score = np.minimum(inside - s, s + size - 1 - inside)
        better = score > best[inside]
        source[inside[better]], best[inside[better]] = k, score[better]
    return starts, source


def late_call(context, texts: str | Sequence[str], chunks: Any, *, options: EmbedOptions, prompt: str | None,
              prompt_name: str | None, late_overlap: int | None) -> Call:
    """``encode(truncate="late")``: the window requests of every document, collected into one float32
    ``[n_chunks, dim]`` array per document (one array for a single string)."""
    prefix, suffix = context.tokenizer.special_affixes()
    max_len = context.pipeline.settings.max_model_len
    size = max_len - len(prefix) - len(suffix)
    overlap = size // 4 if late_overlap is None else late_overlap
    if not is_count(overlap) or not 0 <= overlap < size:
        raise ValueError(f"late_overlap={late_overlap!r}: expected an integer from 0 to {size - 1} (tokens; a window "
                         f"holds {size} text tokens, the model's length less the special tokens)")
    requests, _, members = resolve(context, texts, chunks, options=options, prompt=prompt, prompt_name=prompt_name,
                                   name="chunks")
    windows: list[Request] = []
    plans: list[Windows] = []
    raw = TokenEmbedOptions(normalize=False)
    for request in requests:
        if request.num_tokens <= max_len:
            plans.append(Windows(len(windows), [0], np.zeros(0, dtype=np.int64)))
            windows.append(dataclasses.replace(request, index=len(windows), options=raw, prompt_len=0))
            continue
        body = request.token_ids[len(prefix):request.num_tokens - len(suffix)]
        starts, source = plan_windows(len(body), size, overlap)
        plans.append(Windows(len(windows), starts, source, (len(prefix), len(suffix))))
        for s in starts:
            ids = prefix + body[s:s + size] + suffix
            windows.append(Request(len(windows), request.text, raw, request.prompt, ids,
                                   token_type_ids=None if request.token_type_ids is None else [0] * len(ids)))
    normalize = context.pipeline.settings.normalize

    def collect(results: list[np.ndarray]) -> Any:
        out = []
        for request, plan, chunk_members in zip(requests, plans, members):
            states = document_states(plan, results)
            means = np.stack([states[m].astype(np.float64).mean(0) for m in chunk_members])
            out.append(finish_for_request(means, request.options, normalize))
        return out[0] if isinstance(texts, str) else out

    return Call(windows, collect)


def document_states(plan: Windows, results: list[np.ndarray]) -> np.ndarray:
    """A document's ``[num_tokens, dim]`` token states from its window results: its one window's, else each text
    token's from its window (the special tokens' from the first and last windows)."""
    if not plan.source.size:
        return results[plan.first]
    parts = results[plan.first:plan.first + len(plan.starts)]
    (n_prefix, n_suffix), body = plan.affixes, np.empty((plan.source.size, parts[0].shape[1]), dtype=np.float32)
    for k, (s, part) in enumerate(zip(plan.starts, parts)):
        at = np.flatnonzero(plan.source == k)
        body[at] = part[n_prefix + at - s]
    return np.concatenate([parts[0][:n_prefix], body, parts[-1][len(parts[-1]) - n_suffix:]])
