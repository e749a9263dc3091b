"""The torch <-> JAX bridge: zero-copy handoff, jax_call with gradients and torch.compile."""
