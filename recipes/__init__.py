"""The recipe catalog as data: recipes/<org>/<model>/<target>.yaml (this file makes it package data)."""
