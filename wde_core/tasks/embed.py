"""The ``embed`` and ``token_embed`` tasks: ``encode`` (pooled vectors) and ``embed_tokens`` (every token's)."""

from __future__ import annotations

from typing import Any, Sequence

from wde_core.stages.output import DENSE, check_outputs, collect_embeddings, parse_output
from wde_core.stages.request import EmbedOptions, TokenEmbedOptions, as_image_input
from wde_core.tasks import Call, long_input_policy
from wde_core.tasks.chunking import chunked_call
from wde_core.tasks.late_chunking import late_call


def encode(context, texts: str | Sequence[str], *, normalize: bool | None = None, dimensions: int | None = None,
           prompt: str | None = None, prompt_name: str | None = None, truncate: bool | str | None = None,
           output: str | Sequence[str] = "dense", chunks: Any = None, late_overlap: int | None = None) -> Any:
    """Embed ``texts`` (the ``embed`` task): a float32 array ``[n, dim]``, ``[dim]`` for a single string.

    ``normalize``/``dimensions`` override the model's (Matryoshka); ``prompt``/``prompt_name`` prepend an
    instruction. ``truncate``: ``True`` cuts an over-long input, ``False`` refuses it, ``"chunk"`` returns the
    token-weighted mean of its chunks' embeddings, ``None`` follows ``long_inputs``; ``"late"`` (late chunking)
    returns ``[n_chunks, dim]`` per text (a list for a list), the mean of each of its ``chunks``' token states
    from the whole text (windows sharing ``late_overlap`` tokens beyond ``max_model_len``). ``output``: another
    output a model serves (bge-m3: ``"sparse"``, ``"colbert"``), or a tuple of names for a dict of them."""
    names, _ = parse_output(output)
    check_outputs(names, getattr(context.output_processor, "outputs", (DENSE,)), context.pipeline.model.name)
    if isinstance(truncate, str) and truncate not in ("chunk", "late"):
        raise ValueError(f"truncate={truncate!r}: expected True, False, 'chunk', 'late' or None")
    if truncate == "late":
        check_pools_hidden_states(context, truncate)
    if truncate == "late" or chunks is not None or late_overlap is not None:
        if truncate != "late" or output != DENSE:
            raise ValueError(f"chunks and late_overlap serve truncate='late' with output='dense' only; got "
                             f"truncate={truncate!r}, output={output!r}")
        return late_call(context, texts, chunks, options=EmbedOptions(normalize=normalize, dimensions=dimensions),
                         prompt=prompt, prompt_name=prompt_name, late_overlap=late_overlap)
    policy = long_input_policy(context, truncate, chunk_ok=True)
    options = EmbedOptions(normalize=normalize, dimensions=dimensions, output=names)
    requests = context.input_processor.process(texts, prompt=prompt, prompt_name=prompt_name, options=options)
    single = isinstance(texts, str) or as_image_input(texts) is not None
    if policy == "chunk":
        check_pools_hidden_states(context, policy)
        if names != (DENSE,):
            raise ValueError(f"truncate='chunk' serves output='dense' only, not {output!r}")
        return chunked_call(context, requests, output, single=single)
    context.tokenizer.tokenize(requests, truncate=policy)
    return Call(requests, lambda results: collect_embeddings(results, output, single=single))


def check_pools_hidden_states(context, truncate: str) -> None:
    """Refuse ``truncate='chunk'``/``'late'`` (means of vectors, of token states) for a model whose output processor
    assembles outputs of its own (bge-m3, SPLADE), before any work."""
    outputs = tuple(getattr(context.output_processor, "outputs", (DENSE,)))
    if outputs != (DENSE,):
        raise ValueError(f"truncate={truncate!r} averages dense vectors: model {context.pipeline.model.name!r} has "
                         f"outputs {', '.join(outputs)} of its own; pass truncate=True or False")


def embed_tokens(context, texts: str | Sequence[str], *, normalize: bool = False, prompt: str | None = None,
                 prompt_name: str | None = None, truncate: bool | None = None) -> Any:
    """Every token's last hidden state (the ``token_embed`` task, TEI's ``/embed_all``): a list of float32 arrays
    ``[num_tokens, dim]`` (one for a single string), special tokens included, each L2-normalized when
    ``normalize=True``. ``truncate``: ``True`` cuts, ``False`` refuses an over-long input, ``None`` follows
    ``long_inputs``."""
    if not isinstance(normalize, bool):
        raise TypeError(f"normalize: expected a bool, got {type(normalize).__name__}")
    policy = long_input_policy(context, truncate, chunk_ok=False)
    requests = context.input_processor.process(texts, prompt=prompt, prompt_name=prompt_name,
                                              options=TokenEmbedOptions(normalize=normalize))
    context.tokenizer.tokenize(requests, truncate=policy)
    return Call(requests, lambda results: results[0] if isinstance(texts, str) else results)
