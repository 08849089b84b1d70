"""Backends: the Backend interface, the registry, and one sub-package per target."""
