"""The evaluation stage: BLEU and chrF by sentence length with bootstrap intervals, trained runs as
systems, forced-decoding likelihoods, attention alignment quality, and the reports, curves and heat maps.
"""
