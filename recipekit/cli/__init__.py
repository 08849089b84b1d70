"""The `recipe` command line: one module per command group, thin over library calls."""
