"""parsers/stack_frames.toml: every [[activity]] entry matches its examples and none of its counter-examples; the
library/user split of frames."""

from __future__ import annotations

import pytest

from ncclpm.ingest.stacks.frames import frame_rules, short_file

RULES = frame_rules()
ENTRIES = [(a, ex, True) for a in RULES.activities for ex in a.examples] + [
    (a, ex, False) for a in RULES.activities for ex in a.counterexamples
]


def _frame(example: str) -> tuple[str, str | None, str | None]:
    parts = example.split(" ")
    return parts[0], parts[1] if len(parts) > 1 else None, parts[2] if len(parts) > 2 else None


def test_every_entry_has_examples_and_counterexamples() -> None:
    for a in RULES.activities:
        assert a.examples and a.counterexamples, a.id


@pytest.mark.parametrize(("act", "example", "hit"), ENTRIES, ids=[f"{a.id}:{e}" for a, e, _ in ENTRIES])
def test_activity_example(act, example: str, hit: bool) -> None:
    func, file, caller = _frame(example)
    user = not RULES.is_library(file)
    found = RULES.match(func, file, caller, user)
    if hit:
        assert found is not None and found.activity == act.activity, (example, found)
    else:
        assert found is None or found.id != act.id, (example, found.id)


@pytest.mark.parametrize(
    ("file", "library"),
    [
        ("torch/distributed/distributed_c10d.py", True),  # py-spy: relative to site-packages
        ("/opt/venv/lib/python3.11/site-packages/torch/serialization.py", True),
        ("/usr/local/lib/python3.11/threading.py", True),
        ("queue.py", True),  # py-spy: the standard library
        ("multiprocessing/connection.py", True),
        ("libc.so.6", True),  # a native frame's library
        ("hang_train.py", False),
        ("fairseq/data/iterators.py", False),  # not a package we know: the user's framework
        ("/workspace/stack-hangs/hang_train.py", False),
        ("/code/train.py", False),  # an absolute path is the user's tree even if its first part is a stdlib name
    ],
)
def test_library_or_user(file: str, library: bool) -> None:
    assert RULES.is_library(file) is library


def test_short_file() -> None:
    assert short_file("/opt/venv/lib/python3.11/site-packages/torch/x.py") == "torch/x.py"
    assert short_file("/usr/local/lib/python3.11/queue.py") == "queue.py"
    assert short_file("torch/x.py") == "torch/x.py"
    assert short_file("/workspace/run/train.py") == "train.py"
