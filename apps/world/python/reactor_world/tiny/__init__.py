"""The tiny world (issue 40): a raycaster to learn from, the action-conditioned causal DiT, its session, training data and evaluation."""
