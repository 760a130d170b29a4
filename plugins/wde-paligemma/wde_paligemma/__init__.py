"""wde-paligemma: ColPali (PaliGemma's SigLIP tower and Gemma decoder) late-interaction retrieval on wde."""
