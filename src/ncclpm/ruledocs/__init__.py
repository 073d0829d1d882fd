"""The rules' documentation without importing the rules (they import polars): the generated index `ncclpm rules`
and `ncclpm explain` read (`index.py`, `rules_index.json`) and the README's rule table (`readme.py`)."""
