"""The pydoc language model: the corpus, its tokenizer, the training script and the perplexity check."""
