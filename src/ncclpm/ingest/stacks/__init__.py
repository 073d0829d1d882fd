"""The stack-dump reader: py-spy (text and JSON), faulthandler, gdb and torch's debug server -> the `stacks`
table (`build.py`), frames parsed by `parse.py` and classified by the vocabulary of `frames.py`."""
