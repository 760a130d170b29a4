"""wde plugin for what every cross-encoder shares: the rerank and classify workflows and their stages, the
variant matchers and the score activation. Model families register their ``*ForSequenceClassification``
architectures on it (``wde_cross_encoder.public``)."""

__version__ = "0.1.0"
