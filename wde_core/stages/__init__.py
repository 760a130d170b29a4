"""The core's default implementation of each engine stage, registered by ``wde_core.builtin``."""
