"""CV02 cuda-build-mismatch."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category
from ncclpm.util.frames import ordered

UNDEFINED_SYMBOL = "native.undefined_symbol"  # the loader refusing a compiled library (parsers/python_runtime.toml)


class CudaBuildDoesNotFit(Rule):
    """The CUDA build does not fit the machine: newer than the driver, no kernels for the GPU, or no CUDA/NCCL at all.

    ## What it detects
    `CUDA driver version is insufficient for CUDA runtime version` (a wheel or container built for a newer CUDA
    than the node's driver supports), `no kernel image is available for execution on the device` / NCCL's
    `Cuda failure 'invalid device function'` (kernels built for other GPU architectures), torch's warning
    that a GPU's `CUDA capability sm_NN is not compatible with the current PyTorch installation`, and a build
    with no CUDA or NCCL at all (`Torch not compiled with CUDA enabled`, `Distributed package doesn't have NCCL
    built in`: a CPU-only wheel, or Windows/macOS where torch has no NCCL); and a compiled library the loader
    refuses (`ImportError: .../flash_attn_2_cuda...so: undefined symbol: ...`: built against another torch, or
    torch's own libraries finding another NCCL or CUDA library than theirs).

    ## Why it matters
    The driver and the GPU are fine; the software installed on them is the wrong build. Draining the node,
    reloading the driver or changing NCCL settings does nothing, and the same image fails the same way on every
    node of this kind until the build and the machine agree.

    ## Example
    `[rank0]: RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version`.
    """

    id = "CV02"
    name = "cuda-build-mismatch"
    category = Category.CONFIG_VERSION
    base_confidence = 0.85
    explains = ("CT01", "CR01", "CR02", "NV01")
    FIXES: ClassVar[dict[str, Fix]] = {
        "driver": Fix(
            "Match the build to the driver: install the torch wheel for the CUDA version the driver supports "
            "(`nvidia-smi` prints it top right; e.g. `pip install torch --index-url "
            "https://download.pytorch.org/whl/cu121` for a 12.1-12.x driver), or upgrade the node's driver.",
            when="the CUDA runtime is newer than the driver",
        ),
        "arch": Fix(
            "Install a build with kernels for this GPU: compare `torch.cuda.get_arch_list()` with "
            "`torch.cuda.get_device_capability()` (sm_90 needs a CUDA >= 11.8 wheel, sm_100/sm_120 need CUDA >= "
            "12.8); a custom build needs `TORCH_CUDA_ARCH_LIST` to include it.",
            when="the build has no kernels for the GPU's architecture",
        ),
        "abi": Fix(
            "Install the library built for the installed torch: reinstall the extension against it (`pip install "
            "--no-build-isolation --force-reinstall --no-cache-dir <package>`) or pin torch to the version it was "
            "built for; for torch's own libraries (`libtorch_cuda.so: undefined symbol: nccl...`) make torch load the "
            "NCCL and CUDA libraries of its own wheel (remove a system NCCL from `LD_LIBRARY_PATH`, reinstall the "
            "matching `nvidia-nccl-cu*` wheel).",
            when="a compiled library was built against other versions (`undefined symbol`)",
        ),
        "backend": Fix(
            "Install a CUDA build of torch on the GPU nodes (`pip install torch --index-url "
            "https://download.pytorch.org/whl/cu126`; `torch.version.cuda` must not be `None`); NCCL exists only "
            'in Linux CUDA builds: on Windows or macOS use `init_process_group(backend="gloo")`.',
            when="the build has no CUDA or no NCCL",
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        return ordered(t.kinds(K.cuda_build_mismatch), "ts", "source", "line", nulls_last=True)

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        # `value` names what the build lacks altogether (CUDA, NCCL): read first, it decides alone
        lacking = sorted(set(ev["value"].drop_nulls().to_list()))
        # a compiled library the loader refused (`undefined symbol`): built against other versions than installed
        abi = ev.filter(pl.col("event") == UNDEFINED_SYMBOL)
        fits = ev.filter(pl.col("value").is_null() & (pl.col("event") != UNDEFINED_SYMBOL))
        too_old = "driver version is insufficient|driver on your system is too old"
        driver = fits["detail"].fill_null("").str.contains(too_old).any()
        arch = not fits.filter(~pl.col("detail").fill_null("").str.contains(too_old)).is_empty()
        ranks = tuple(sorted(set(ev["rank"].drop_nulls().to_list())))
        ran = f"{ranks_text(ranks)} ran" if ranks else "the job ran"
        what = (
            f"The torch build {ran} has no {' or '.join(lacking)} support"
            if lacking
            else f"A compiled library {ranks_text(ranks) if ranks else 'the job'} loaded, "
            f"`{abi['var'][0]}`, was built against other versions of torch, CUDA or NCCL than the ones installed"
            if fits.is_empty() and not abi.is_empty()
            else f"{ran.capitalize()} a CUDA runtime newer than the node's driver supports"
            if driver and not arch
            else f"The build {ran} has no CUDA kernels for this GPU's architecture"
            if arch and not driver
            else f"The build {ran} does not fit the node (its driver and its GPU architecture)"
        )
        if lacking:
            ev = ev.sort(pl.col("value").is_null())  # quote what the build lacks first
            driver = arch = False
        mismatched = not abi.is_empty() and not lacking and fits.is_empty()
        return self.finding(
            culprit_ranks=ranks,
            summary=f"{what}: `{ev['detail'][0]}`. "
            + (
                "The installed packages do not fit each other; the driver and the GPU are not broken."
                if mismatched
                else "The installed build is wrong for this machine; the driver and the GPU are not broken."
            ),
            explanation="A torch wheel (and the NCCL inside it) is built for one CUDA version and a list of GPU "
            "architectures. A driver older than that CUDA version refuses to run it; a GPU whose architecture is "
            "not in the list has no kernels to run. Either way every process on such a node fails at its first "
            "GPU call, and collectives with it fail or time out."
            if not lacking and not mismatched
            else "A compiled library names the symbols it needs from the libraries it was built with; when the "
            "installed ones differ (torch upgraded under an extension, another NCCL or CUDA library found first on "
            "LD_LIBRARY_PATH), the loader refuses it and the process fails at import, the same way on every rank."
            if mismatched
            else "A CPU-only wheel has no CUDA, and only Linux CUDA wheels carry NCCL: the process fails at its first "
            "GPU call or at `init_process_group(backend='nccl')`, on every machine where this build is installed.",
            evidence=quotes(ev, 4),
            fixes=self.fixes(
                *(["driver"] if driver else []),
                *(["arch"] if arch else []),
                *(["backend"] if lacking else []),
                *(["abi"] if not abi.is_empty() else []),
            ),
            dont=(
                "Do not drain the node or reload the driver: the same build fails on every node like it.",
                "NCCL settings (`NCCL_P2P_DISABLE`, `NCCL_IB_DISABLE`) do not change which CUDA build runs.",
            ),
            verify=(
                '`python -c "import torch; print(torch.version.cuda, torch.cuda.get_arch_list(), '
                'torch.cuda.get_device_capability())"` on the node runs and lists its architecture.',
            ),
        )
