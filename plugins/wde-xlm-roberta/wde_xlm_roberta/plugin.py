"""Registers XLM-RoBERTa for the embed task, the bge-m3 variant with its three outputs, the token
classifiers for the token_classify task and the cross-encoders (bge-reranker) on wde-cross-encoder's
``rerank``/``classify`` workflows."""

from __future__ import annotations

from dataclasses import replace

from wde_core.plugin_api import EMBED_WORKFLOW, ArchitectureLink, hookimpl
from wde_cross_encoder.public import cross_encoder_links

PADDING_IDX = 1  # XLM-R's <pad>; positions start at PADDING_IDX + 1 (the link's position_offset)

CROSS_ENCODER = "wde_xlm_roberta.model:XLMRobertaCrossEncoder"
DEFAULTS = {"pooling": "cls", "normalize": False, "position_offset": PADDING_IDX + 1}


@hookimpl
def wde_register_architectures(register):
    """``XLMRobertaModel`` embeds (pooling from the sentence-transformers files, else CLS); a
    directory with bge-m3's head files is served by the bge-m3 variant; ``*ForTokenClassification``
    serves the token_classify task; ``XLMRobertaForSequenceClassification`` reranks with ``num_labels == 1``
    and classifies with more labels."""
    for architecture in ("XLMRobertaModel", "XLMRobertaForMaskedLM", "RobertaModel", "RobertaForMaskedLM"):
        register(ArchitectureLink(
            architecture=architecture, task="embed", workflow="embed",
            model="wde_xlm_roberta.model:XLMRobertaEncoder", defaults=DEFAULTS,
            description="(XLM-)RoBERTa encoder (multilingual-e5, arctic-embed-l-v2.0, paraphrase-multilingual)",
        ))
    register(ArchitectureLink(
        architecture="XLMRobertaModel", task="embed", workflow="bge-m3",
        model="wde_xlm_roberta.bge_m3:BgeM3Model", defaults=DEFAULTS, variant="bge-m3",
        matches="wde_xlm_roberta.bge_m3:has_bge_m3_heads",
        description="bge-m3: dense, sparse (lexical weights) and ColBERT outputs from one pass",
    ))
    for architecture in ("XLMRobertaForTokenClassification", "RobertaForTokenClassification"):
        register(ArchitectureLink(
            architecture=architecture, task="token_classify", workflow="embed",
            model="wde_xlm_roberta.model:XLMRobertaTokenClassifier", defaults=DEFAULTS,
            description="(XLM-)RoBERTa token classifier (NER, PII): per-token logits for classify_tokens",
        ))
    for link in cross_encoder_links("XLMRobertaForSequenceClassification", CROSS_ENCODER,
                                    "cross-encoder ({variant}): {task}", defaults={"position_offset": PADDING_IDX + 1}):
        register(link)


@hookimpl
def wde_register_output_processors(register):
    """bge-m3's output processor: dense vectors, lexical weights and ColBERT vectors."""
    register("bge-m3", "wde_xlm_roberta.bge_m3_output:BgeM3OutputProcessor", "dense, sparse and colbert outputs")


@hookimpl
def wde_register_workflows(register):
    """The embed workflow with bge-m3's output processor."""
    register(replace(EMBED_WORKFLOW, name="bge-m3", output_processor="bge-m3",
                     description="texts -> dense, sparse and ColBERT embeddings (output=...)"))
