"""Checks of the sm_80 kernels (recipekit.backends.cuda_sm80.kernels): plain-torch references on the
oracle's math, synthetic weights in the real encodings, the parity harness, the sm_80 validity
compile and the roofline bench."""
