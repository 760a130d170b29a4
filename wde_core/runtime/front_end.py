"""The core tasks' front-end methods, written out once for ``Engine`` (they return results) and ``AsyncEngine``
(they return awaitables). Each runs its task-table entry (``wde_core.builtin.TASKS``) by name through
``self.call``: the prepare function registered there validates, tokenizes and collects; a test holds each
signature here equal to its prepare function's. Methods of tasks that plugins register resolve by name."""

from __future__ import annotations

from typing import Any, Sequence


class TaskMethods:
    """``encode``, ``embed_tokens``, ``score``, ``rerank``, ``classify`` and ``classify_tokens``;
    ``show_progress=True`` draws a progress bar on stderr (``Engine`` only)."""

    def encode(self, texts: str | Sequence[str], *, normalize: bool | None = None, dimensions: int | None = None,
               prompt: str | None = None, prompt_name: str | None = None, truncate: bool | str | None = None,
               output: str | Sequence[str] = "dense", chunks: Any = None, late_overlap: int | None = None,
               show_progress: bool = False) -> Any:
        """Embed ``texts`` (the ``embed`` task): a float32 array ``[n, dim]``, ``[dim]`` for a single string.

        ``normalize``/``dimensions`` override the model's (Matryoshka); ``prompt``/``prompt_name`` prepend an
        instruction. ``truncate``: ``True`` cuts an over-long input, ``False`` refuses it, ``"chunk"`` returns the
        token-weighted mean of its chunks' embeddings, ``None`` follows ``long_inputs``; ``"late"`` (late chunking)
        returns ``[n_chunks, dim]`` per text (a list for a list), the mean of each of its ``chunks``' token states
        from the whole text (windows sharing ``late_overlap`` tokens beyond ``max_model_len``). ``output``: another
        output a model serves (bge-m3: ``"sparse"``, ``"colbert"``), or a tuple of names for a dict of them."""
        return self.call("encode", texts, normalize=normalize, dimensions=dimensions, prompt=prompt,
                         prompt_name=prompt_name, truncate=truncate, output=output, chunks=chunks,
                         late_overlap=late_overlap, show_progress=show_progress)

    def embed_tokens(self, texts: str | Sequence[str], *, normalize: bool = False, prompt: str | None = None,
                     prompt_name: str | None = None, truncate: bool | None = None, show_progress: bool = False) -> Any:
        """Every token's last hidden state (the ``token_embed`` task, TEI's ``/embed_all``): float32 arrays
        ``[num_tokens, dim]``, special tokens included, each L2-normalized when ``normalize=True``."""
        return self.call("embed_tokens", texts, normalize=normalize, prompt=prompt, prompt_name=prompt_name,
                         truncate=truncate, show_progress=show_progress)

    def score(self, pairs: Sequence[tuple[str, str]], *, raw_scores: bool = False, truncate: bool | None = None,
              show_progress: bool = False) -> Any:
        """Relevance scores of ``(query, document)`` pairs (the ``rerank`` task), float32 ``[n]``: the model's
        activation of its logit (``raw_scores=True``: the logits). ``truncate=True`` cuts documents, never queries."""
        return self.call("score", pairs, raw_scores=raw_scores, truncate=truncate, show_progress=show_progress)

    def rerank(self, query: Any, documents: Sequence[Any], *, top_n: int | None = None, return_documents: bool = False,
               raw_scores: bool = False, truncate: bool | None = None, show_progress: bool = False) -> Any:
        """Score ``documents`` against ``query`` (the ``rerank`` task): ``[{"index", "score"[, "document"]}]``, best
        first (ties in input order), the best ``top_n`` only if given. A reranker that reads images takes an image
        or a ``{"text", "image"}`` dict on either side; a text cross-encoder refuses them, naming the field."""
        return self.call("rerank", query, documents, top_n=top_n, return_documents=return_documents,
                         raw_scores=raw_scores, truncate=truncate, show_progress=show_progress)

    def classify(self, texts: str | Sequence[Any], *, raw_scores: bool = False, truncate: bool | None = None,
                 show_progress: bool = False) -> Any:
        """Per-label probabilities ``{label: p}`` (the ``classify`` task) for each text or ``(text, text)`` pair
        (``raw_scores=True``: the logits); a single string or pair gives one dict."""
        return self.call("classify", texts, raw_scores=raw_scores, truncate=truncate, show_progress=show_progress)

    def classify_tokens(self, texts: str | Sequence[str], *, aggregation: str | None = None, stride: int | None = None,
                        ignore_labels: Sequence[str] | None = None, truncate: bool | None = None,
                        show_progress: bool = False) -> Any:
        """Per-token labels (the ``token_classify`` task: NER, PII) with character offsets: per text, every
        token's logits, labels and scores (``aggregation=None``), or the entities transformers' token-classification
        pipeline groups with ``aggregation`` ``"none"``, ``"simple"``, ``"first"``, ``"average"`` or ``"max"``;
        ``stride``: windows over a long text, resolved as the pipeline's."""
        return self.call("classify_tokens", texts, aggregation=aggregation, stride=stride, ignore_labels=ignore_labels,
                         truncate=truncate, show_progress=show_progress)
