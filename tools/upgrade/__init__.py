"""Engine upgrades: what moving a recipe to another vLLM release breaks, read from the release's own sources."""
