"""Leaves: small helpers that import nothing of ncclpm, so any stage (and the renderers) may use them - escaping
for every output, bounds on numbers read from input, output files, signal names, the shipped data files, ASCII
regex classes."""
