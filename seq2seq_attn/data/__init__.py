"""The data stage: where parallel pairs come from (local files, Multi30k's official files, Hugging Face,
the synthetic language), cleaning, the Moses tokenizer, and the prepared line-aligned splits with their
manifest.
"""
