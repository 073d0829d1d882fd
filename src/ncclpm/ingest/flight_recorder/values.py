"""A load's distinct nested values (sizes, dtypes, stacks): each checked once, entries hold their ids.

Used by `fr_decode` (the Python path keys each value by its `repr`) and `fr_native` (the C decoder writes the same
keys for a dump's distinct values), which share one `_Interner` per nested column and load.
"""

from __future__ import annotations

import polars as pl

MAX_NESTED = 65_536  # real sizes/dtypes/stacks hold a few to a few hundred elements
_I64 = (-(2**63), 2**63 - 1)


def _ok_int(v: object) -> bool:
    return type(v) is int and _I64[0] <= v <= _I64[1]


def _ok_sizes(v: object) -> bool:
    if not isinstance(v, list | tuple) or len(v) > MAX_NESTED:
        return False
    total = 0
    for dims in v:
        if not isinstance(dims, list | tuple) or not all(map(_ok_int, dims)):
            return False
        total += len(dims)
    return total <= MAX_NESTED


def _ok_strings(v: object) -> bool:
    return isinstance(v, list | tuple) and len(v) <= MAX_NESTED and all(type(s) is str for s in v)


def _ok_frames(v: object) -> bool:
    if not isinstance(v, list | tuple) or len(v) > MAX_NESTED:
        return False
    for f in v:
        if not isinstance(f, dict):
            return False
        name, filename, line = f.get("name"), f.get("filename"), f.get("line")
        if not (name is None or type(name) is str) or not (filename is None or type(filename) is str):
            return False
        if not (line is None or _ok_int(line)):
            return False
    return True


_CHECKS = {
    "input_sizes": _ok_sizes,
    "output_sizes": _ok_sizes,
    "input_dtypes": _ok_strings,
    "output_dtypes": _ok_strings,
    "frames": _ok_frames,
}


def _key(value: object) -> object:
    try:
        return repr(value)
    except (ValueError, RecursionError):  # an int past the str digit limit, a JSON value nested ~1000 deep
        return object()  # a key equal to no other (such a value is of the wrong shape anyway)


def _keys(values: list) -> list:
    """Exact keys for plain nested values: `repr` (equal for equal values of the same types, whatever objects the
    pickle shared: `marshal` was not, it writes a second reference to an object as a back-reference). The C
    decoder writes the same keys (`_frdecode.repr_nested`)."""
    try:
        return list(map(repr, values))
    except (ValueError, RecursionError):
        return list(map(_key, values))


class _Interner:
    """Distinct nested values of a load, each checked once: entries hold ids, polars converts each value once.

    Keys are exact (`_keys`), so equal ids mean equal values and the analysis compares ids; None and values of
    the wrong shape get no id (null)."""

    def __init__(self, name: str, dtype: pl.DataType) -> None:
        self.name, self.check = name, _CHECKS[name]
        self.dtype = dtype
        self.index: dict = {}
        self.uniq: list = []
        self.bad: set = set()  # keys of values of the wrong shape

    def add(self, values: list) -> tuple[list, bool]:
        """(ids, whether some value was of the wrong shape)."""
        keys = _keys(values)
        self._register({k: v for k, v in zip(keys, values, strict=True) if k not in self.index})
        return list(map(self.index.__getitem__, keys)), bool(self.bad) and not self.bad.isdisjoint(keys)

    def add_distinct(self, keys: list, values: list) -> tuple[list, bool]:
        """`add` for a dump's distinct values (the C decoder's): (their ids, whether one was of the wrong shape)."""
        self._register({k: v for k, v in zip(keys, values, strict=True) if k not in self.index})
        return list(map(self.index.__getitem__, keys)), bool(self.bad) and not self.bad.isdisjoint(keys)

    def _register(self, new: dict) -> None:
        index, uniq = self.index, self.uniq
        for k, v in new.items():
            if v is None or not self.check(v):
                index[k] = None
                if v is not None:
                    self.bad.add(k)
            else:
                index[k] = len(uniq)
                uniq.append(v)

    def values(self) -> pl.Series:
        return pl.Series(self.name, self.uniq, dtype=self.dtype, strict=False)
