"""Configs written for nomic-ai's remote code (``n_embd``, ``rotary_emb_base``, ...) read as transformers' names."""

from __future__ import annotations

import copy

# remote-code key -> transformers' NomicBertConfig attribute
_KEYS = {"n_embd": "hidden_size", "n_head": "num_attention_heads", "n_layer": "num_hidden_layers",
         "n_inner": "intermediate_size", "layer_norm_epsilon": "layer_norm_eps"}
_GATED = {"swiglu": "silu", "geglu": "gelu"}  # activation_function -> the gate's activation
# remote-code options whose other values this plugin does not implement: key -> the implemented value
_REFUSED = {"prenorm": False, "parallel_block": False, "rotary_emb_interleaved": False, "rotary_emb_fraction": 1.0,
            "rotary_scaling_factor": None, "use_rms_norm": False, "causal": False, "qkv_proj_bias": False,
            "mlp_fc1_bias": False, "mlp_fc2_bias": False}


def adopt_original_keys(config):
    """``config``, or a copy with nomic-ai's remote-code keys under transformers' names (unsupported ones refused)."""
    if getattr(config, "n_embd", None) is None:
        return config
    for key, implemented in _REFUSED.items():
        value = getattr(config, key, implemented)
        if value != implemented:
            raise ValueError(f"{config.model_type}: {key}={value!r} is not supported by wde-rope-encoders "
                             f"(only {key}={implemented!r})")
    config = copy.deepcopy(config)
    for key, name in _KEYS.items():
        if getattr(config, key, None) is not None:
            setattr(config, name, getattr(config, key))
    activation = getattr(config, "activation_function", "swiglu")
    if activation not in _GATED:
        raise ValueError(f"{config.model_type}: activation_function={activation!r} is not supported "
                         f"by wde-rope-encoders (only {', '.join(_GATED)})")
    config.hidden_act = _GATED[activation]
    config.head_dim = config.hidden_size // config.num_attention_heads
    config.rope_parameters = {"rope_type": "default", "rope_theta": float(getattr(config, "rotary_emb_base", 1000))}
    return config
