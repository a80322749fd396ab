"""A run's files: the run folder training writes and every decode reads (its checkpoints, best and latest,
its copy of the vocabulary), the checkpoint file, averaging, the exported model folder with its model card,
the Hugging Face hub, and the lexical shortlist's table. Below both training, which saves them, and
decoding, which finds and loads them.
"""
