"""Engram n-gram tables as the sm_80 engine reads them: deterministic row addressing, the engine's
rules on the shards (rules), a row reader over the safetensors regions (reader), the placed
Engram folder (placement), per-layout ranks (ranks), disk fitness (bench) and hot-row warming
(warm). research/dsv41-format.md §4, research/consumers.md §3, research/engram-store.md."""
