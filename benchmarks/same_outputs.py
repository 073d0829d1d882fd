"""Whether two checkouts read the same inputs the same way: every table, the kept lines and the JSON Diagnosis.

    python benchmarks/same_outputs.py dump OUT INPUT...    # with each checkout's python, into its own OUT
    python benchmarks/same_outputs.py compare OUT_A OUT_B  # DataFrame.equals per table, the rest byte for byte

`dump` writes, per input, each table of `api.build` (`lines`, `events`, `tracebacks`, `elastic`, `ranks`, every
extra table) and the kept lines (`read_kept_lines`' frame) as Parquet, the Tables' other fields, and
`render_json` of the Diagnosis. Speed work must leave all of them as they were (issue 28's rounds)."""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl


def dump(out: Path, inputs: list[str]) -> None:
    import ncclpm.ingest.build as build_mod
    from ncclpm import api
    from ncclpm.engine import diagnose_tables
    from ncclpm.render import render_json

    kept: dict[str, pl.DataFrame] = {}
    read = build_mod.read_kept_lines

    def keeping(*args: object, **kw: object) -> pl.DataFrame:
        kept["kept"] = read(*args, **kw)  # type: ignore[arg-type]
        return kept["kept"]

    build_mod.read_kept_lines = keeping  # type: ignore[assignment]
    for arg in inputs:
        kept.clear()
        t = api.build([arg])
        folder = out / arg.strip("/").replace("/", "_")
        folder.mkdir(parents=True, exist_ok=True)
        tables = {name: getattr(t, name) for name in ("lines", "events", "tracebacks", "elastic", "ranks")}
        tables |= {"extra." + k: v for k, v in t.extra.items() if isinstance(v, pl.DataFrame)}
        tables |= {"kept": kept["kept"]} if isinstance(kept.get("kept"), pl.DataFrame) else {}
        for name, frame in tables.items():
            frame.write_parquet(folder / f"{name}.parquet")
        fields = (t.job_name, t.world_size, t.world_size_declared, t.sources, t.warnings, t.nccl_log, t.line_prefix)
        (folder / "fields.txt").write_text(repr((*fields, t.code_sources, sorted(tables))))
        (folder / "diagnosis.json").write_text(render_json(diagnose_tables(t, (), ())))


def compare(a: Path, b: Path) -> int:
    names = sorted(p.name for p in a.iterdir())
    if names != sorted(p.name for p in b.iterdir()):
        print("not the same inputs")
        return 1
    differ = tables = 0
    for name in names:
        for f in sorted((a / name).iterdir()):
            g = b / name / f.name
            if not g.exists():
                print("missing:", name, f.name)
                differ += 1
            elif f.suffix == ".parquet":
                x, y = pl.read_parquet(f), pl.read_parquet(g)
                tables += 1
                if x.schema != y.schema or not x.equals(y, null_equal=True):
                    print("differs:", name, f.name, x.shape, y.shape)
                    differ += 1
            elif f.read_bytes() != g.read_bytes():
                print("differs:", name, f.name)
                differ += 1
    print(f"{len(names)} inputs, {tables} tables compared, {differ} differences")
    return 1 if differ else 0


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "dump":
        dump(Path(sys.argv[2]), sys.argv[3:])
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)
