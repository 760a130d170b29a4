"""Assembling a pipeline: engine arguments, the model directory, settings decided once, the workflow resolved."""
