"""Names shared by every stage: the corpus splits and the two sides of a pair.

They sit at the bottom of the package's layers (docs/architecture.md) so that the config, the data
stage and the vocabulary can all name a split without importing one another.
"""

SPLITS = ("train", "valid", "test")  # the corpus splits, in this order everywhere
SIDES = ("src", "tgt")  # the two languages of a prepared split: <split>.src and <split>.tgt
TOKENIZED_SPLIT = "train"  # with data.tokenize: the one split prepared tokenised (dev/test keep their text)
