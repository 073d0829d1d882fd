"""Prove a pickle is plain, bounded data before anything is unpickled: one pass over its opcodes.

`scan` runs the pickle machine on sizes instead of objects.  Every value on its stack and in its memo is a
record ``[size, depth, flags]``: *size* is how many values the object holds once every reference is
expanded (a string counts 1 + len/8), *depth* how deeply it nests.  So, before the C unpickler or polars
build anything, a dump is refused when:

* it names a global, a class, a persistent id, an extension or an out-of-band buffer (code, not data);
* what it expands to, counting references (a memo ``GET`` of a list costs the whole list again), is more
  than ``EXPANSION_PER_BYTE`` values per byte of the file: a reference bomb that would take gigabytes once
  turned into columns;
* it nests deeper than `MAX_DEPTH` (real dumps nest 5 deep);
* a memo index is more than `MEMO_SLACK` past the number of values memoised so far (the unpickler sizes
  its memo table by the largest index: ``LONG_BINPUT 2**26`` alone is a 1 GiB table);
* a list, dict or set is changed after a second reference to it was taken (``GET``/``DUP``): that is
  the only way to build a cycle (``L = [L]``) and no pickler does it for data without cycles;
* it is truncated, uses an unknown opcode, or pops what is not there.

`ncclpm.ingest.flight_recorder._frscan` (C, optional) implements the same function; this module is the reference and the
fallback, and the tests run both on the same inputs.
"""

from __future__ import annotations

MAX_DEPTH = 32
EXPANSION_PER_BYTE = 32
MIN_BUDGET = 1 << 20  # small dumps may still hold a few shared stacks
MEMO_SLACK = 256
_MUT, _FROZEN, _IMM = 1, 2, 0
_SCALAR = (1, 0, _IMM)


class Refused(ValueError):
    """The pickle is not plain bounded data (the message says why)."""


def budget_for(n_bytes: int) -> int:
    return max(MIN_BUDGET, EXPANSION_PER_BYTE * n_bytes)


_REFUSED = {
    0x93: "STACK_GLOBAL",
    0x52: "REDUCE",
    0x62: "BUILD",
    0x6F: "OBJ",
    0x81: "NEWOBJ",
    0x92: "NEWOBJ_EX",
    0x82: "EXT1",
    0x83: "EXT2",
    0x84: "EXT4",
    0x50: "PERSID",
    0x51: "BINPERSID",
    0x97: "NEXT_BUFFER",
    0x98: "READONLY_BUFFER",
}
# length-prefixed payloads: opcode -> (bytes of the length field, signed)
_LEN_PREFIXED = {
    0x8C: (1, False),  # SHORT_BINUNICODE
    0x58: (4, False),  # BINUNICODE
    0x8D: (8, False),  # BINUNICODE8
    0x43: (1, False),  # SHORT_BINBYTES
    0x42: (4, False),  # BINBYTES
    0x8E: (8, False),  # BINBYTES8
    0x96: (8, False),  # BYTEARRAY8
    0x55: (1, False),  # SHORT_BINSTRING
    0x54: (4, True),  # BINSTRING
    0x8A: (1, False),  # LONG1
    0x8B: (4, True),  # LONG4
}
_FIXED_SCALAR = {0x4B: 1, 0x4D: 2, 0x4A: 4, 0x47: 8}  # BININT1, BININT2, BININT, BINFLOAT
_CONST = (0x4E, 0x88, 0x89)  # NONE, NEWTRUE, NEWFALSE
_LINE_SCALAR = (0x49, 0x4C, 0x46, 0x53, 0x56)  # INT, LONG, FLOAT, STRING, UNICODE


def _line(data: bytes, pos: int) -> tuple[bytes, int]:
    end = data.find(b"\n", pos)
    if end < 0:
        raise Refused("truncated (a text argument has no end)")
    return data[pos:end], end + 1


def _printable(raw: bytes) -> str:
    return "".join(chr(c) if 32 <= c < 127 else "?" for c in raw[:60])


def _index(raw: bytes) -> int:
    if not raw.isdigit() or len(raw) > 12:
        raise Refused(f"bad memo index ({_printable(raw[:20])})")
    return int(raw)


try:  # the C build of `scan_py` (hatch_build.py compiles it when a compiler is there)
    from ncclpm.ingest.flight_recorder import _frscan  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - depends on the install
    _frscan = None
NATIVE = _frscan is not None


def scan(data: bytes, budget: int | None = None, max_depth: int = MAX_DEPTH) -> None:
    """Return if `data` is a plain, bounded pickle; raise `Refused` (with the reason) otherwise."""
    limit = budget_for(len(data)) if budget is None else budget
    if _frscan is None:
        scan_py(data, limit, max_depth)
        return
    why = _frscan.scan(data, limit, max_depth, MEMO_SLACK)
    if why is not None:
        raise Refused(why)


def scan_py(data: bytes, limit: int, max_depth: int = MAX_DEPTH) -> None:
    """The pure-Python scan (reference and fallback; ~40x slower than the C build)."""
    stack: list = []
    marks: list[int] = []
    memo: dict[int, object] = {}
    n = len(data)
    pos = 0

    def add(target: object, items: list) -> None:
        """Put `items` into the container `target` (APPEND(S), SETITEM(S), ADDITEMS)."""
        if type(target) is not list or target[2] != _MUT:
            frozen = type(target) is list and target[2] == _FROZEN
            why = "a value changed after a second reference to it was taken (a cycle?)" if frozen else ""
            raise Refused(why or "corrupt (items added to something that is not a list, dict or set)")
        size, depth = target[0], target[1]
        for it in items:
            size += it[0]
            if it[1] >= depth:
                depth = it[1] + 1
        if size > limit:
            raise Refused(f"expands to more than {limit} values counting references (a reference bomb?)")
        if depth > max_depth:
            raise Refused(f"nested deeper than {max_depth} levels")
        target[0], target[1] = size, depth

    def build(items: list | tuple, kind: int) -> list:
        size, depth = 1, 1
        for it in items:
            size += it[0]
            if it[1] >= depth:
                depth = it[1] + 1
        if size > limit:
            raise Refused(f"expands to more than {limit} values counting references (a reference bomb?)")
        if depth > max_depth:
            raise Refused(f"nested deeper than {max_depth} levels")
        return [size, depth, kind]

    def pop_mark() -> list:
        if not marks:
            raise Refused("corrupt (no MARK to pop to)")
        at = marks.pop()
        items = stack[at:]
        del stack[at:]
        return items

    def put(idx: int) -> None:
        if not stack:
            raise Refused("corrupt (memo put on an empty stack)")
        if idx > len(memo) + MEMO_SLACK:
            raise Refused(f"memo index {idx} far past the {len(memo)} values memoised (a memo table bomb?)")
        memo[idx] = stack[-1]

    def get(idx: int) -> None:
        rec = memo.get(idx)
        if rec is None:
            raise Refused(f"corrupt (memo index {idx} was never set)")
        if type(rec) is list and rec[2] == _MUT:
            rec[2] = _FROZEN
        stack.append(rec)

    while pos < n:
        op = data[pos]
        pos += 1
        if op == 0x68:  # BINGET
            if pos >= n:
                raise Refused("truncated")
            get(data[pos])
            pos += 1
        elif op == 0x94:  # MEMOIZE
            put(len(memo))
        elif op == 0x28:  # MARK
            marks.append(len(stack))
        elif op in _FIXED_SCALAR:
            pos += _FIXED_SCALAR[op]
            stack.append(_SCALAR)
        elif op == 0x5D or op == 0x7D or op == 0x8F:  # EMPTY_LIST, EMPTY_DICT, EMPTY_SET
            stack.append([1, 1, _MUT])
        elif op == 0x75:  # SETITEMS
            items = pop_mark()
            if not stack or len(items) % 2:
                raise Refused("corrupt (SETITEMS)")
            add(stack[-1], items)
        elif op == 0x61:  # APPEND
            if len(stack) < 2:
                raise Refused("corrupt (APPEND)")
            add(stack[-2], [stack.pop()])
        elif op == 0x65 or op == 0x90:  # APPENDS, ADDITEMS
            items = pop_mark()
            if not stack:
                raise Refused("corrupt (APPENDS)")
            add(stack[-1], items)
        elif op in _LEN_PREFIXED:
            width, signed = _LEN_PREFIXED[op]
            if pos + width > n:
                raise Refused("truncated")
            size = int.from_bytes(data[pos : pos + width], "little", signed=signed)
            pos += width
            if size < 0 or pos + size > n:
                raise Refused("truncated (a length runs past the end)")
            pos += size
            stack.append((1 + size // 8, 0, _IMM))
        elif op in _CONST:
            stack.append(_SCALAR)
        elif op == 0x85 or op == 0x86 or op == 0x87:  # TUPLE1..3
            k = op - 0x84
            if len(stack) < k:
                raise Refused("corrupt (TUPLE)")
            items = stack[-k:]
            del stack[-k:]
            stack.append(build(items, _IMM))
        elif op == 0x71:  # BINPUT
            if pos >= n:
                raise Refused("truncated")
            put(data[pos])
            pos += 1
        elif op == 0x72:  # LONG_BINPUT
            if pos + 4 > n:
                raise Refused("truncated")
            put(int.from_bytes(data[pos : pos + 4], "little"))
            pos += 4
        elif op == 0x6A:  # LONG_BINGET
            if pos + 4 > n:
                raise Refused("truncated")
            get(int.from_bytes(data[pos : pos + 4], "little"))
            pos += 4
        elif op == 0x73:  # SETITEM
            if len(stack) < 3:
                raise Refused("corrupt (SETITEM)")
            v = stack.pop()
            k = stack.pop()
            add(stack[-1], [k, v])
        elif op == 0x29:  # EMPTY_TUPLE
            stack.append([1, 1, _IMM])
        elif op == 0x74 or op == 0x91:  # TUPLE, FROZENSET
            stack.append(build(pop_mark(), _IMM))
        elif op == 0x6C or op == 0x64:  # LIST, DICT
            items = pop_mark()
            if op == 0x64 and len(items) % 2:
                raise Refused("corrupt (DICT)")
            stack.append(build(items, _MUT))
        elif op == 0x30:  # POP
            if marks and marks[-1] == len(stack):
                marks.pop()
            elif stack:
                stack.pop()
            else:
                raise Refused("corrupt (POP)")
        elif op == 0x31:  # POP_MARK
            pop_mark()
        elif op == 0x32:  # DUP
            if not stack:
                raise Refused("corrupt (DUP)")
            rec = stack[-1]
            if type(rec) is list and rec[2] == _MUT:
                rec[2] = _FROZEN
            stack.append(rec)
        elif op == 0x80:  # PROTO
            pos += 1
        elif op == 0x95:  # FRAME: a length only; the opcodes inside are scanned like the others
            pos += 8
        elif op in _LINE_SCALAR:
            raw, pos = _line(data, pos)
            stack.append((1 + len(raw) // 8, 0, _IMM))
        elif op == 0x67:  # GET
            raw, pos = _line(data, pos)
            get(_index(raw))
        elif op == 0x70:  # PUT
            raw, pos = _line(data, pos)
            put(_index(raw))
        elif op == 0x2E:  # STOP
            if not stack:
                raise Refused("corrupt (STOP on an empty stack)")
            return
        elif op == 0x63 or op == 0x69:  # GLOBAL, INST
            module, pos = _line(data, pos)
            name, pos = _line(data, pos)
            raise Refused(f"refused global {_printable(module)}.{_printable(name)}")
        elif op in _REFUSED:
            raise Refused(f"refused opcode {_REFUSED[op]} (code, not data)")
        else:
            raise Refused(f"unknown opcode 0x{op:02x}")
    raise Refused("truncated (no STOP)")
