"""Who noticed first: torch's dump-coordination and error-propagation lines and NCCL's own diagnostics become the
report's "Who noticed first" section (and ncclras lines map a pid to its rank for stack dumps)."""

from __future__ import annotations

from pathlib import Path

from ncclpm.api import diagnose
from ncclpm.render import render

LOG = """\
[rank3]:[E1122 10:00:00.100000000 ProcessGroupNCCL.cpp:1] [PG ID 0 PG GUID 0(default_pg) Rank 3] First PG on this rank to signal dumping.
[rank0]:[E1122 10:00:01.000000000 ProcessGroupNCCL.cpp:1] [PG ID 0 PG GUID 0(default_pg) Rank 0] Observed flight recorder dump signal from another rank via TCPStore.
[rank1]:[E1122 10:00:01.000000000 ProcessGroupNCCL.cpp:1] [PG ID 0 PG GUID 0(default_pg) Rank 1] Received a dump signal due to a collective timeout from  rank 3 and we will try our best to dump the debug info. Last enqueued NCCL work: 56116, last completed NCCL work: 56115.This is most likely caused by incorrect usages of collectives
node03:24051:24120 [5] ras/diagnostics.cc:412 NCCL DIAG ECC: uncorrected volatile errors on rank(s) 2 (worst=3) across 4 ranks in comm 0x5f3ac81b2e10
"""
RAS = """\
Communicators... (0.00s)
=============

Warnings
========

#0-0 (27d9fdc3a8e1e3f1) MISMATCH
  3 ranks have launched up to operation 5812
  Rank 2 has not launched any operations -- GPU 2 managed by process 31131 on node node01
"""
PYSPY = """\
Process 31131: python train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 31131 (idle): "MainThread"
    evaluate (train.py:40)
    main (train.py:90)
    <module> (train.py:99)
"""


def test_who_noticed_first_and_ncclras(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text(LOG)
    (tmp_path / "ncclras.txt").write_text(RAS)
    d = diagnose([tmp_path])
    noticed = " ".join(d.noticed)
    assert "Rank 3 noticed first" in d.noticed[0]
    assert "Ranks 0, 1 dumped on another rank's signal" in noticed
    assert "uncorrected volatile errors on rank(s) 2" in noticed
    assert "ncclras: rank 2 had not launched any operation" in noticed
    md = render(d, "md")
    assert "**Who noticed first:** Rank 3 noticed first" in md
    assert "Who noticed first" in render(d, "html")


def test_ncclras_status_maps_a_dumped_pid_to_its_rank(tmp_path: Path) -> None:
    (tmp_path / "ncclras.txt").write_text(RAS)
    (tmp_path / "dump_31131.txt").write_text(PYSPY)
    d = diagnose([tmp_path])
    assert d.stack_tree is not None
    assert d.stack_tree["classes"][0]["members"] == ["rank 2"]
