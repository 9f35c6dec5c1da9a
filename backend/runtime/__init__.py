"""The model runtime: loading, the KV cache, the constrained decoder and the baselines (torch)."""
