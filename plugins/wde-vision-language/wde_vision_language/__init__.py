"""wde-vision-language: the stages, vision towers and positions vision-language models share (Qwen-VL, ColPali)."""
