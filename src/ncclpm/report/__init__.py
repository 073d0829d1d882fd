"""The report layer: what the engine adds to a verdict to make the `Diagnosis` - the failing collective and the
per-rank rows (`facts.py`), what happened in time order (`story.py`), why not the others (`dismiss.py`), the
connected settings and timeouts (`connected.py`), who noticed first (`noticed.py`), the stack tree and whether it
agrees (`stacks.py`), and what on-call does next (`actions.py`)."""
