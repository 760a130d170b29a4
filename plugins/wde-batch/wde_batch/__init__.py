"""wde-batch: ``wde encode`` and ``wde rerank`` over texts from arguments, files or stdin."""
