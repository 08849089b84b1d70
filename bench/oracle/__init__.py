"""The DeepSeek-V4.1 fp32 reference forward (oracle): streaming weights, full-vocabulary log-probs.

Modules: reader (one weight reader over the original and Gaudi layouts), mhc, attention, moe,
engram, model (the prefill forward), run (prompt set -> reference file). torch is imported by
these modules only; nothing outside this package imports them at top level.
"""
