"""The evaluation stage, in two parts: `metrics/` scores texts (BLEU and chrF by sentence length with
bootstrap intervals and paired tests, the reports, curves and HTML page) and never runs a model;
`models/` runs trained models (their translations as systems, forced-decoding likelihoods, attention
alignment quality and heat maps) and scores what they give with `metrics/`.
"""
