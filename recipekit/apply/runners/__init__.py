"""Runners start, identify and stop the server a recipe launches: native (a process group in
the engine's own venv) and docker (a container built and run through docker-py)."""
