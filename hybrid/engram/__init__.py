"""Engram n-gram tables: deterministic row addressing, the page-aligned row store on NVMe,
its prefetcher and its benchmark (research/dsv41-format.md §4, research/engram-store.md)."""
