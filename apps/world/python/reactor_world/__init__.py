"""The world app's model half: a causal Wan2.1 DiT with a rolling KV cache (see ``model.py``)."""
