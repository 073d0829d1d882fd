"""A printf format string, as a producer (NCCL, torch's C++) writes it in its source, turned into a regex that
matches what it prints.

`printf_regex(fmt, args)` gives a pattern valid in Python's `re` and in Rust's `regex` crate (polars): no
look-around, no back-references, `(?P<name>...)` groups, only the metacharacters both escape alike. A conversion
whose argument tells what it holds (`ncclSocketToString(&addr, ...)` -> `peer`, `strerror(errno)` -> `errno_text`,
`dev->devName` -> `device`, `qp->qp_num` -> `qp`, ...) becomes a named group; the others are matched unnamed. `args`
are the printf arguments' source text, one per argument the format consumes (a `%*d` consumes two).

Standalone on purpose (stdlib only, nothing else from ncclpm): scripts/vocab uses it to test every extracted format
against its own generated instances, and a catalog loader can build patterns from declared formats with it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_CONV = re.compile(
    r"%(?P<flags>[-+ #0']*)(?P<width>\*|\d+)?(?:\.(?P<prec>\*|\d*))?(?P<len>hh|h|ll|l|z|j|t|L|q)?"
    r"(?P<conv>[diouxXeEfFgGaAcspnm%])"
)
_META = set("\\.^$|?*+()[]{}")


@dataclass(frozen=True, slots=True)
class Conversion:
    start: int
    end: int
    spec: str  # the whole `%...` text
    flags: str
    width: str | None
    precision: str | None
    length: str
    conv: str
    arg_index: int | None  # the argument holding the value (None: %% and %m take none)
    nargs: int  # arguments consumed (width/precision stars included)


def conversions(fmt: str) -> list[Conversion]:
    """Each `%` conversion of `fmt`, with the index of the argument printed by it."""
    out = []
    k = 0
    for m in _CONV.finditer(fmt):
        conv = m["conv"]
        if conv in "%m":
            out.append(
                Conversion(m.start(), m.end(), m[0], m["flags"], m["width"], m["prec"], m["len"] or "", conv, None, 0)
            )
            continue
        stars = (m["width"] == "*") + (m["prec"] == "*")
        out.append(
            Conversion(
                m.start(), m.end(), m[0], m["flags"], m["width"], m["prec"], m["len"] or "", conv, k + stars, stars + 1
            )
        )
        k += stars + 1
    return out


_ESCAPES = {ord(ch): "\\" + ch for ch in _META} | {
    **{c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F]},
    ord("\n"): r"\n",
    ord("\t"): r"\t",
}


def escape(text: str) -> str:
    """`text` as a literal in both dialects (Rust rejects some escapes Python's re.escape writes, e.g. `\\ `)."""
    return text.translate(_ESCAPES)


# --- what an argument holds -------------------------------------------------------------------------------------

# (regex on the argument's source text, on the text of the format just before it (or None), field name).
# First match wins; the names follow ncclpm's event fields where one fits (peer, hca -> device, nranks...).
_ARG_NAMES: list[tuple[re.Pattern[str], re.Pattern[str] | None, str]] = [
    (
        re.compile(r"SocketToString|SocketToHost|addrStr|AddrStr|remoteAddr|peerAddr|ipStr|sockStr", re.I),
        re.compile(r"(?:peer|remote|from|to|[Cc]onnect\w*|with|rank \S+ \()\s*$"),
        "peer",
    ),
    (re.compile(r"SocketToString|SocketToHost|addrStr|AddrStr|ipStr|sockStr|\baddr\b", re.I), None, "addr"),
    (re.compile(r"\bstrerror(?:_r)?\s*\(|gai_strerror|\berrnoStr", re.I), None, "errno_text"),
    (re.compile(r"cudaGetErrorString|cuGetErrorString|cudaGetErrorName|cuGetErrorName|errStr"), None, "cuda_error"),
    (re.compile(r"ncclGetErrorString"), None, "nccl_error"),
    (re.compile(r"nvmlErrorString"), None, "nvml_error"),
    (re.compile(r"ibvWcStatusStr"), None, "wc_status"),  # NCCL's own table: IBV_WC_RETRY_EXC_ERR
    (re.compile(r"ibv_wc_status_str"), None, "wc_status_text"),  # libibverbs': "transport retry counter exceeded"
    (re.compile(r"event_type_str|EventTypeStr|ibvEventType"), None, "ib_event"),
    (re.compile(r"wcOpcodeStr|wc_opcode_str|\bopcode\b", re.I), None, "opcode"),
    (re.compile(r"(?:->|\.)status\b"), None, "status"),
    (re.compile(r"vendor_err"), None, "vendor_err"),
    (re.compile(r"devName|dev_name|device_name|get_device_name|ibvDevName|hcaName"), None, "device"),
    (re.compile(r"\bportNum\b|\bport_num\b|\bib_port\b|\bibPort\b"), None, "port"),
    (re.compile(r"qp_num|\bqpn\b|qpNum", re.I), None, "qp"),
    (re.compile(r"ifName|if_name|ifname|\bifa_name\b|ifNames?\b|interfaceName", re.I), None, "interface"),
    (re.compile(r"\bnRanks\b|\bnranks\b"), None, "nranks"),
    (re.compile(r"\blocalRanks?\b|\blocalRank\b"), None, "local_rank"),
    (re.compile(r"\bpeerRank\b|\bremoteRank\b|\bpeer\b(?!\w*(?:Info|->))"), None, "peer_rank"),
    (re.compile(r"(?:^|->|\.)rank$|^rank$|\bmyRank\b"), None, "rank"),
    (re.compile(r"\bcudaDev\b"), None, "cuda_dev"),
    (re.compile(r"\bbusId\b", re.I), None, "bus_id"),
    (re.compile(r"\b(?:size|bytes|nbytes|len|length|nBytes|bufferSize|realSize)\b", re.I), None, "size"),
    (re.compile(r"__func__|__FUNCTION__"), None, "function"),
    (re.compile(r"\b(?:hostname|hostName|hostHash)\b"), None, "host"),
    (re.compile(r"\bpath\b|shmPath|filename|fileName|\bfile\b|devPath|\bsymlink", re.I), None, "path"),
    (re.compile(r"\berrno\b"), None, "errno"),
    (re.compile(r"\bcommHash\b|\bcommId\b"), None, "comm_id"),
    (re.compile(r"\bversion\b|Version\b"), None, "version"),
    (re.compile(r"\btimeout\w*\b", re.I), None, "timeout"),
]


def arg_name(arg: str, before: str = "") -> str | None:
    """The field an argument fills, from its source text (and the format text just before it)."""
    for arg_rx, before_rx, name in _ARG_NAMES:
        if arg_rx.search(arg) and (before_rx is None or before_rx.search(before[-24:])):
            return name
    return None


# --- regex pieces -----------------------------------------------------------------------------------------------

_TOKEN_FIELDS = {"peer", "addr", "device", "interface", "host", "path", "function", "wc_status", "opcode", "status"}
_NUMBER = {"d": r"-?\d+", "i": r"-?\d+", "u": r"\d+", "o": r"[0-7]+", "x": r"[0-9a-f]+", "X": r"[0-9A-F]+"}
_FLOAT = r"-?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|inf|nan|-?0x[0-9a-fA-F.p+-]+)"


def conversion_regex(c: Conversion, name: str | None, last: bool) -> str:
    """The pattern of one conversion's output. `last`: nothing literal follows it (its text runs to the end)."""
    pad = r" *" if c.width and c.width != "0" and "-" not in c.flags else ""
    if c.conv in "diuoxX":
        body = _NUMBER[c.conv]
        if "'" in c.flags:
            body = body.replace(r"\d", r"[\d,]")
        if "+" in c.flags or " " in c.flags:
            body = r"[-+ ]?" + body.lstrip("-?")
        if "#" in c.flags and c.conv in "xX":
            body = r"0[xX]" + body
        if "0" in c.flags:
            pad = ""
    elif c.conv in "eEfFgGaA":
        body = _FLOAT
    elif c.conv == "c":
        body = "."
    elif c.conv == "p":
        body = r"(?:0x[0-9a-fA-F]+|\(nil\))"
    elif c.conv == "m":
        body = ".+" if last else ".+?"
    elif c.conv == "%":
        return "%"
    elif name in _TOKEN_FIELDS:
        body = r"\S+" if last else r"\S+?"
    else:  # a string: anything, possibly empty
        body = ".*" if last else ".*?"
        pad = ""
    if c.width and "-" in c.flags and c.conv != "s":
        body += " *"
    return f"{pad}(?P<{name}>{body})" if name else pad + body


def field_names(fmt: str, args: Sequence[str] | None) -> list[str | None]:
    """One name (or None) per conversion of `fmt`, unique within it (`peer`, `peer_2`)."""
    names: list[str | None] = []
    seen: dict[str, int] = {}
    for c in conversions(fmt):
        name = None
        if c.conv == "m":
            name = "errno_text"
        elif c.arg_index is not None and args is not None and c.arg_index < len(args):
            name = arg_name(args[c.arg_index], fmt[: c.start])
        if name:
            seen[name] = seen.get(name, 0) + 1
            if seen[name] > 1:
                name = f"{name}_{seen[name]}"
        names.append(name)
    return names


def printf_regex(
    fmt: str, args: Sequence[str] | None = None, *, named: bool = True, names: Sequence[str | None] | None = None
) -> str:
    """The regex matching what `printf(fmt, ...)` prints (unanchored; a trailing newline is the line's end and is
    left out). Named groups where `args` tell what a conversion holds, or as `names` says (one per conversion,
    None or "" for none: a catalog entry's declared fields)."""
    fmt = fmt.rstrip("\n")
    convs = conversions(fmt)
    if names is not None:
        if len(names) != len(convs):
            raise ValueError(f"{len(names)} names for the {len(convs)} conversions of {fmt!r}")
        names = [n or None for n in names]
    else:
        names = field_names(fmt, args) if named else [None] * len(convs)
    out, pos = [], 0
    for c, name in zip(convs, names, strict=True):
        out.append(escape(fmt[pos : c.start]))
        out.append(conversion_regex(c, name, last=c.end == len(fmt)))
        pos = c.end
    out.append(escape(fmt[pos:]))
    return "".join(out)


def literal_chunks(fmt: str) -> list[str]:
    """The literal text between conversions (what any line printed by `fmt` contains)."""
    fmt = fmt.rstrip("\n")
    chunks, pos = [], 0
    for c in conversions(fmt):
        if c.conv == "%":
            continue
        chunks.append(fmt[pos : c.start].replace("%%", "%"))
        pos = c.end
    chunks.append(fmt[pos:].replace("%%", "%"))
    return [x for x in chunks if x]


def is_generic(fmt: str, min_literal: int = 6) -> bool:
    """A format with too little literal text to be told apart from others (`%s`, `%s: %s`): it matches almost
    any line and must not be read on its own."""
    return sum(len(x.strip()) for x in literal_chunks(fmt)) < min_literal
