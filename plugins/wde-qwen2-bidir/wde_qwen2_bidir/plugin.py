"""Registers the decoder-embedding workflow, its engine arguments and tokenizer, and the decoder
architectures (Qwen2, Qwen3, Llama, Mistral; base models and ``*ForCausalLM`` checkpoints alike); and
Qwen3-Reranker and mxbai-rerank-v2 as LLM rerankers (workflows ``llm-rerank``, ``mxbai-rerank``) on
wde-llm-rerank's pair stages."""

from __future__ import annotations

from dataclasses import replace

from wde_core.plugin_api import EMBED_WORKFLOW, ArchitectureLink, hookimpl

WORKFLOW = "decoder-embed"
MODEL = "wde_qwen2_bidir.model:DecoderEmbedder"
CONFIGURE = "wde_qwen2_bidir.attention_mode:configure"
ARCHITECTURES = {
    "Qwen2Model": "Qwen2 decoder: RoPE, GQA, RMSNorm, SwiGLU, q/k/v biases",
    "Qwen2ForCausalLM": "Qwen2 decoder (language-model head skipped): RoPE, GQA, RMSNorm, SwiGLU, q/k/v biases",
    "Qwen3Model": "Qwen3 decoder (Qwen3-Embedding): RoPE, GQA, RMSNorm, q/k head norms, SwiGLU",
    "Qwen3ForCausalLM": "Qwen3 decoder (language-model head skipped): RoPE, GQA, RMSNorm, q/k head norms, SwiGLU",
    "LlamaModel": "Llama decoder: RoPE (llama3 scaling), GQA, RMSNorm, SwiGLU",
    "LlamaForCausalLM": "Llama decoder (language-model head skipped): RoPE (llama3 scaling), GQA, RMSNorm, SwiGLU",
    "MistralModel": "Mistral decoder: RoPE, GQA, RMSNorm, SwiGLU; max length capped at the sliding window",
    "MistralForCausalLM": "Mistral decoder (language-model head skipped); max length capped at the sliding window",
}
# Every known decoder embedder normalizes its embeddings (gte-Qwen2, Qwen3-Embedding, e5-mistral, LLM2Vec).
DEFAULTS = {"pooling": "last", "normalize": True, "causal": True}


RERANK = "wde_qwen2_bidir.llm_rerank"
# architecture, workflow, variant, module, matcher, configure, description: the LLM rerankers' links
LLM_RERANKERS = (
    ("Qwen3ForCausalLM", "llm-rerank", "qwen3-reranker", "wde_qwen2_bidir.llm_rerank", "is_qwen3_reranker",
     "configure_rerank", "Qwen3-Reranker: an LLM yes/no reranker"),
    ("Qwen2ForCausalLM", "mxbai-rerank", "mxbai-rerank-v2", "wde_qwen2_bidir.mxbai_rerank", "is_mxbai_reranker",
     "configure_mxbai", "mxbai-rerank-v2: an LLM 1/0 reranker"),
)


@hookimpl
def wde_register_engine_args(register):
    """The core's engine arguments plus ``enable_bidirectional``."""
    register("decoder", "wde_qwen2_bidir.engine_args:DecoderEngineArgs",
             "the core's arguments plus enable_bidirectional (True, False, or None to follow the model)")


@hookimpl
def wde_register_tokenizers(register):
    """The core's fast tokenizer, appending EOS when the tokenizer config asks and the tokenizer does not."""
    register("hf-fast-eos", "wde_qwen2_bidir.tokenizer:EosAppendingTokenizer",
             "the model's fast tokenizer; EOS appended when tokenizer_config.json has add_eos_token")
    register("qwen3-rerank", f"{RERANK}:Qwen3RerankTokenizer", "pairs in Qwen3-Reranker's chat prompt")
    register("mxbai-rerank", "wde_qwen2_bidir.mxbai_rerank:MxbaiRerankTokenizer", "pairs in mxbai-rerank-v2's prompt")


@hookimpl
def wde_register_workflows(register):
    """The core's embed workflow with the decoder's tokenizer and engine arguments."""
    register(replace(EMBED_WORKFLOW, name=WORKFLOW, tokenizer="hf-fast-eos", engine_args="decoder",
                     description="texts -> decoder last hidden states -> pooled (last token by default) embeddings"))
    register(replace(EMBED_WORKFLOW, name="llm-rerank", input_processor="llm-pairs", tokenizer="qwen3-rerank",
                     output_processor="yes-no-score", engine_args="llm-rerank",
                     description="(query, document) pairs -> chat prompt -> sigmoid(logit yes - logit no)"))
    register(replace(EMBED_WORKFLOW, name="mxbai-rerank", input_processor="llm-pairs", tokenizer="mxbai-rerank",
                     output_processor="yes-no-score", engine_args="llm-rerank",
                     description="(query, document) pairs -> mxbai-rerank-v2 prompt -> sigmoid(logit 1 - logit 0)"))


@hookimpl
def wde_register_architectures(register):
    """Each decoder architecture embeds through ``decoder-embed`` with the one decoder model class."""
    for architecture, description in ARCHITECTURES.items():
        register(ArchitectureLink(
            architecture=architecture,
            task="embed",
            workflow=WORKFLOW,
            model=MODEL,
            defaults=DEFAULTS,
            description=description,
            configure=CONFIGURE,
        ))
    for architecture, workflow, variant, module, matcher, configure, description in LLM_RERANKERS:
        register(ArchitectureLink(
            architecture=architecture, task="rerank", workflow=workflow,
            model=f"{RERANK}:Qwen3YesNoReranker",
            defaults={"pooling": "last", "normalize": False, "causal": True, "activation": "sigmoid"},
            variant=variant, matches=f"{module}:{matcher}", configure=f"{module}:{configure}",
            description=f"{description} (task='rerank' forces it)",
        ))
