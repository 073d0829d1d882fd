"""CV01 versions-differ-across-ranks."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category


def _same_build_once(banners: pl.DataFrame) -> pl.DataFrame:
    """pip names a wheel without its local label (`torch==2.14.1` in collect_env for the `2.14.1+cu130` the ranks
    print): such a version is the same build when the job shows a labelled one of the same base, not a drift."""
    base = pl.col("version").str.replace(r"\+.*$", "")
    labelled = banners.filter(pl.col("version").str.contains("+", literal=True)).select("kind", base.alias("_base"))
    same = banners.with_columns(base.alias("_base")).join(labelled.unique(), on=["kind", "_base"], how="semi")
    unlabelled_dupe = same.filter(~pl.col("version").str.contains("+", literal=True)).select("source", "line")
    return banners.join(unlabelled_dupe, on=["source", "line"], how="anti")


class VersionsDifferAcrossRanks(Rule):
    """Ranks or hosts run different NCCL / torch versions, or NCCL itself reports a version mismatch.

    ## What it detects
    NCCL version banners (`NCCL version 2.21.5+cuda12.4`) or torch version lines that differ between hosts or
    ranks of one job, and NCCL's `NCCL version mismatch with remote peer` warning.

    ## Why it matters
    NCCL's wire protocol and PyTorch's collective bookkeeping are only guaranteed between identical versions;
    mixed images (a node with an older container, a stale venv on one host) give hangs at init or garbage
    results that look like network trouble.

    ## Example
    `node01 ... NCCL version 2.21.5+cuda12.4` and `node07 ... NCCL version 2.18.1+cuda12.1` in one job.
    """

    id = "CV01"
    name = "versions-differ-across-ranks"
    fires_on = frozenset({K.version_mismatch, K.nccl_version, K.torch_version})
    category = Category.CONFIG_VERSION
    base_confidence = 0.8
    explains = ("CT01", "CR01", "NW01")
    FIXES: ClassVar[dict[str, Fix]] = {
        "one_image": Fix(
            "Run every rank from one image/environment; pin torch (and with it NCCL) in the job's "
            "requirements and rebuild the odd node's container."
        ),
        "log_versions": Fix(
            "Print the versions on every rank at start-up in a form ncclpm reads: "
            "`print(f\"torch {torch.__version__} NCCL version {'.'.join(map(str, torch.cuda.nccl.version()))}\")` "
            "(or run with `NCCL_DEBUG=INFO`, whose banner names the NCCL version)."
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        explicit = t.kinds(K.version_mismatch)
        banners = _same_build_once(t.kinds(K.nccl_version, K.torch_version).filter(pl.col("version").is_not_null()))
        who = pl.coalesce(pl.col("host"), pl.col("rank").cast(pl.String), pl.col("source"))
        banners = banners.with_columns(who.alias("_who"))
        differ = banners.filter(pl.col("version").n_unique().over("kind") > 1)
        # NCCL's own "version mismatch with remote peer" lines first: they are the decisive quotes
        differ = differ.drop("_who").sort("kind", "version", "source", "line")
        return pl.concat([explicit.sort("source", "line"), differ])

    @staticmethod
    def _ranks_per_version(t: Tables, banners: pl.DataFrame) -> pl.DataFrame:
        """(kind, version, ranks, where): a banner counts for every rank of its host, else for its own rank."""
        host_ranks = t.ranks.filter(pl.col("host").is_not_null()).group_by("host").agg(pl.col("rank").alias("_hr"))
        b = banners.join(host_ranks, on="host", how="left").with_columns(
            # one host runs one image: a banner speaks for every rank of its host when the host is known
            pl.when(pl.col("_hr").is_not_null()).then("_hr").otherwise(pl.concat_list(pl.col("rank"))).alias("_r"),
            pl.coalesce(pl.col("host"), pl.col("rank").cast(pl.String), pl.col("source")).alias("_w"),
        )
        return (
            b.explode("_r")
            .group_by("kind", "version")
            .agg(pl.col("_r").drop_nulls().unique().sort().alias("ranks"), pl.col("_w").unique().sort().alias("where"))
            .sort("kind", "version")
        )

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        banners = ev.filter(pl.col("kind").is_in([K.nccl_version, K.torch_version]))
        explicit = not ev.filter(pl.col("kind") == K.version_mismatch).is_empty()
        culprits: set[int] = set()
        detail = "NCCL reports a version mismatch with a peer"
        if not banners.is_empty():
            per = self._ranks_per_version(t, banners)
            detail = "; ".join(
                f"{k.replace('_version', '')} {v} on " + (ranks_text(r) if r else ", ".join(w[:4]))
                for k, v, r, w in per.iter_rows()
            )
            for _kind, group in per.group_by("kind"):
                sizes = group.with_columns(pl.col("ranks").list.len().alias("n")).sort("n", descending=True)
                if sizes.height > 1 and sizes["n"][0] > sizes["n"][1]:  # a clear majority: the rest is the odd one
                    culprits |= {r for rs in sizes.slice(1)["ranks"].to_list() for r in rs}
        confidence = 0.92 if explicit else self.base_confidence
        return self.finding(
            confidence=confidence,
            culprit_ranks=tuple(sorted(culprits)),
            summary=f"Versions differ within the job: {detail}"
            + (f" (odd ones out: {ranks_text(sorted(culprits))})" if culprits else "")
            + ".",
            explanation="Every rank must run the same NCCL and PyTorch build; mixed versions break the wire "
            "protocol or the collective bookkeeping and look like hangs or network errors.",
            evidence=quotes(ev),
            fixes=self.fixes(),
            dont=("No NCCL environment variable makes two NCCL versions interoperate.",),
            verify=("All ranks print the same versions at start-up.",),
        )
