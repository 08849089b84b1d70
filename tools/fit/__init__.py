"""Will it fit? A pre-flight planner: weights per card by tensor class (sharded or replicated by the
engine's rules), the model's KV cache spec, vLLM's own pool formula, and the verdict in vLLM's terms
("KV cache size: N tokens"), calibrated from a boot log when one exists."""
