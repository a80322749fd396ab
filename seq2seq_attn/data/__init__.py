"""Parallel corpus: sources, cleaning, the prepared line-aligned splits and their token cache."""

SPLITS = ("train", "valid", "test")  # the corpus splits, in this order everywhere
SIDES = ("src", "tgt")  # the two languages of a prepared split: <split>.src and <split>.tgt
