"""The vocabulary stage: text to piece ids (sentencepiece or the paper's word shortlist), every split
encoded once into a token cache, and the length-bucketed training batches drawn from it.
"""
