"""Pins and the patch applier; patch packs live as data in packs/<engine>/<profile>/."""
