"""`python -m recipekit` runs the `recipe` CLI."""

from recipekit.cli.main import main

main()
