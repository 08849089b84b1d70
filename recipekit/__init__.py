"""recipekit: one declarative recipe to a working, verified LLM deployment."""

__version__ = "0.1.0"
