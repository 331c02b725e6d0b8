"""Sampling: rollout workers, batches, advantages and observation filters."""
