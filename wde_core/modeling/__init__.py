"""The model-building kit plugins build their models from: linear layers, tensor parallelism, rotary tables."""
