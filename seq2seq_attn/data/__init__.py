"""Parallel corpus: sources, cleaning and the prepared line-aligned splits with their manifest."""
