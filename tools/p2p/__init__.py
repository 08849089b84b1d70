"""Functional P2P probe: a torch worker run in a subprocess (worker.py), judged on the toolkit
side (probe.py) against values recomputed here (patterns.py), cached per driver/GPUs/boot."""
