"""What other plugins may use of wde-gemma (a vision-language plugin declares ``wde-gemma`` as a dependency): the
Gemma decoder over packed sequences (``GemmaEmbedder.scaled_embeddings``, then ``decode``) and its layer."""

from wde_gemma.model import GemmaEmbedder, GemmaLayer

__all__ = ["GemmaEmbedder", "GemmaLayer"]
