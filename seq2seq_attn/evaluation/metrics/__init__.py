"""Text metrics: hypotheses scored against references with sacrebleu, overall and by sentence length,
with bootstrap intervals, paired significance, diagnostics, and the reports, curves and HTML page they
make. Texts in, numbers out: nothing here loads or runs a model.
"""
