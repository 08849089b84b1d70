"""Benchmarks and quality gates against any OpenAI-compatible server."""
