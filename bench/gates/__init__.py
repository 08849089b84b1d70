"""Quality gates run against an OpenAI-compatible server; see runner.py for the entry point."""
