"""Multi-node layouts on vLLM's own distributed engine: node configs, rules, renders, validators."""
