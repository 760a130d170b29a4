"""Registers Qwen3-VL single-vector embedders (``Qwen3VLForConditionalGeneration``, ``Qwen3VLModel``: the
Qwen3-VL-Embedding family) for the embed task, on a workflow of wde-vision-language's text/image input processor and
tokenizer around this plugin's batches (the images' position-embedding taps) and model; and Qwen3-VL-Reranker
(``Qwen3VLForConditionalGeneration``, variant ``qwen3-vl-reranker``) for the rerank task: (query, document) pairs
with texts and images, scored yes/no by wde-llm-rerank's output processor."""

from __future__ import annotations

from dataclasses import replace

from wde_core.plugin_api import EMBED_WORKFLOW, ArchitectureLink, hookimpl


@hookimpl
def wde_register_architectures(register):
    """Both Qwen3-VL architectures on the qwen3-vl-embed workflow."""
    for architecture in ("Qwen3VLForConditionalGeneration", "Qwen3VLModel"):
        register(ArchitectureLink(
            architecture=architecture, task="embed", workflow="qwen3-vl-embed",
            model="wde_qwen3_vl.model:Qwen3VLEmbedder", defaults={"max_model_len": 4096},
            configure="wde_qwen3_vl.settings:configure",
            description="Qwen3-VL embedder (Qwen3-VL-Embedding): texts, images and text + image inputs -> "
                        "last-token vectors",
        ))
    register(ArchitectureLink(
        architecture="Qwen3VLForConditionalGeneration", task="rerank", workflow="qwen3-vl-rerank",
        model="wde_qwen3_vl.model:Qwen3VLReranker", variant="qwen3-vl-reranker",
        matches="wde_qwen3_vl.rerank:is_qwen3_vl_reranker", configure="wde_qwen3_vl.rerank:configure",
        defaults={"pooling": "last", "normalize": False, "causal": True, "activation": "sigmoid",
                  "max_model_len": 10240},  # the script's MAX_LENGTH
        description="Qwen3-VL-Reranker: (query, document) pairs of texts and images -> sigmoid(logit yes - logit "
                    "no) (task='rerank' forces it)",
    ))


@hookimpl
def wde_register_workflows(register):
    """The embed workflow with wde-vision-language's text/image stages and Qwen3-VL's batches."""
    register(replace(EMBED_WORKFLOW, name="qwen3-vl-embed", input_processor="vision-text", tokenizer="qwen2-vl",
                     model_input_builder="qwen3-vl", engine_args="vision-text",
                     description="texts, images, text + image -> Qwen3-VL last-token embeddings (deepstack, "
                                 "interleaved M-RoPE)"))
    register(replace(EMBED_WORKFLOW, name="qwen3-vl-rerank", input_processor="vision-pairs",
                     tokenizer="qwen3-vl-rerank", model_input_builder="qwen3-vl", output_processor="yes-no-score",
                     engine_args="vision-rerank",
                     description="(query, document) pairs of texts and images -> Qwen3-VL-Reranker's prompt -> "
                                 "sigmoid(logit yes - logit no)"))


@hookimpl
def wde_register_engine_args(register):
    """The reranker's: the core's arguments plus ``instruction``."""
    register("vision-rerank", "wde_qwen3_vl.rerank:VisionRerankEngineArgs",
             "the core's arguments plus instruction (the <Instruct> of every pair)")


@hookimpl
def wde_register_input_processors(register):
    """(query, document) pairs whose sides are texts, images or text + image dicts."""
    register("vision-pairs", "wde_qwen3_vl.rerank:VisionPairInputProcessor",
             "(query, document) pairs of texts, images and {'text', 'image'} dicts, checked before any work")


@hookimpl
def wde_register_tokenizers(register):
    """Pairs in Qwen3-VL-Reranker's prompt."""
    register("qwen3-vl-rerank", "wde_qwen3_vl.rerank:VisionRerankTokenizer",
             "pairs in Qwen3-VL-Reranker's prompt, the pair's images through the image processor")


@hookimpl
def wde_register_model_input_builders(register):
    """wde-vision-language's text/image batch plus each patch's position-embedding taps."""
    register("qwen3-vl", "wde_qwen3_vl.stages:Qwen3VLBatchBuilder",
             "packed batch, images' patches, M-RoPE positions, learned-position taps")
