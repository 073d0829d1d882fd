"""A copy of a coloured terminal reads as the plain text: Python 3.13 colours its tracebacks (`File "x.py"`'s path,
line and function, the exception's type), which puts escape codes inside the anchors the reader searches for -
a small text's colours are taken out before the search, so every frame is read."""

from __future__ import annotations

from pathlib import Path

from ncclpm.api import build

PLAIN = """[rank1]: Traceback (most recent call last):
[rank1]:   File "/opt/app/train.py", line 133, in <module>
[rank1]:     model = model.to(local_rank)
[rank1]:   File "/usr/lib/python3.13/site-packages/torch/nn/modules/module.py", line 1340, in to
[rank1]:     return self._apply(convert)
[rank1]: RuntimeError: CUDA error: out of memory
"""


def _coloured(text: str) -> str:
    out = []
    for line in text.splitlines():
        if '  File "' in line:
            head, rest = line.split('  File "', 1)
            path, rest = rest.split('", line ', 1)
            number, func = rest.split(", in ", 1)
            line = f'{head}  File \x1b[35m"{path}"\x1b[0m, line \x1b[35m{number}\x1b[0m, in \x1b[35m{func}\x1b[0m'
        elif "RuntimeError: " in line:
            head, msg = line.split("RuntimeError: ", 1)
            line = f"{head}\x1b[1;35mRuntimeError\x1b[0m: \x1b[35m{msg}\x1b[0m"
        out.append(line)
    return "\n".join(out) + "\n"


def test_python_313_coloured_traceback_reads_as_the_plain_one(tmp_path: Path) -> None:
    for name, text in (("plain", PLAIN), ("coloured", _coloured(PLAIN))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "train.log").write_text(text)
    want, got = build([tmp_path / "plain"]), build([tmp_path / "coloured"])
    assert "\x1b" in (tmp_path / "coloured" / "train.log").read_text()
    assert want.events.filter(want.events["event"] == "frame.python").height == 2
    assert got.events.select("event", "rank").rows() == want.events.select("event", "rank").rows()
    assert got.tracebacks.select("error_type", "frames").rows() == want.tracebacks.select("error_type", "frames").rows()
