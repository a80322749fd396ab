"""Evaluation that runs trained models: their translations as systems of a report, forced-decoding
likelihoods and n-best rescoring, attention turned into word alignments (AER), and attention heat maps.
"""
