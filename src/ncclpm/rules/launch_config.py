"""CF01 launch-misconfigured."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.model import said
from ncclpm.rules._launch import more_processes_than_gpus
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category


class LaunchMisconfigured(Rule):
    """The ranks started but were set up wrong: two ranks on one GPU, a GPU index the node does not have, or a
    launcher and script that disagree.

    ## What it detects
    NCCL's `Duplicate GPU detected : rank 3 and rank 2 both on CUDA device e2000` (two ranks mapped to the
    same device), `CUDA error: invalid device ordinal` (more processes per node than GPUs), a launch command
    that starts more processes per node than the GPUs it leaves visible (`CUDA_VISIBLE_DEVICES=0,1 torchrun
    --nproc_per_node=4`), NCCL's own sockets running out of file descriptors (`NCCL WARN Bootstrap : accept
    failed: Too many open files`: the processes' open-file limit), and argparse errors at start-up such as
    `train.py: error: unrecognized arguments: --local-rank=2` (every worker exits with status 2 and torchrun lists
    them under `Failures:`).

    ## Why it matters
    Nothing is wrong with the network, the GPUs or the training code: the job is configured wrong, so it fails
    the same way on every attempt and on every cluster. Duplicate GPUs come from a missing
    `torch.cuda.set_device(local_rank)` (communicators created lazily on the default device, e.g. device-mesh or
    expert-parallel groups) or a wrong `CUDA_VISIBLE_DEVICES`; `--local-rank` errors from torch 2.0's launcher
    with scripts written for `--local_rank`. The line between this and `init_rendezvous`: there the ranks never
    met; here they met and are set up wrong.

    ## Example
    `[rank2]: ncclInvalidUsage: ... Last error: Duplicate GPU detected : rank 0 and rank 1 both on CUDA
    device 6000`.
    """

    id = "CF01"
    name = "launch-misconfigured"
    fires_on = frozenset(  # (more processes than GPUs: a launcher option's)
        {K.duplicate_gpu, K.gpu_unavailable, K.launcher_args, K.launch_env_missing, K.launch_option_error}
        | {K.fd_exhaustion, K.launcher_option}
    )
    category = Category.CONFIG_VERSION
    base_confidence = 0.9
    explains = ("CT01", "CR01", "RZ01")
    FIXES: ClassVar[dict[str, Fix]] = {
        "set_device": Fix(
            "Call `torch.cuda.set_device(int(os.environ['LOCAL_RANK']))` before `init_process_group` and before any "
            "process group or device mesh is created (or pass `device_id=`); check that `CUDA_VISIBLE_DEVICES` and "
            "`--nproc_per_node` match the GPUs of the node.",
            when="two ranks on one GPU, or a GPU index the node does not have",
        ),
        "see_gpus": Fix(
            "Run the job where its processes see the GPUs: `nvidia-smi` inside the container must list them (`docker "
            "run --gpus all`, the NVIDIA container toolkit, a pod's `nvidia.com/gpu` limit), `CUDA_VISIBLE_DEVICES` "
            "must not be empty, and torch must be a CUDA build "
            "(`python -c 'import torch; print(torch.version.cuda)'`).",
            when="a process saw no GPU at all",
        ),
        "local_rank_arg": Fix(
            "Accept both spellings in the script (`parser.add_argument('--local-rank', '--local_rank', type=int)`) "
            "or, better, read `int(os.environ['LOCAL_RANK'])` and launch with `torchrun`: since torch 2.0 "
            "`torch.distributed.launch` passes `--local-rank`.",
            when="the script rejects `--local-rank`",
        ),
        "open_files": Fix(
            "Raise the open-file limit where the ranks start: `ulimit -n 1048576` in the launch script, "
            "`--ulimit nofile=1048576:1048576` for docker, `LimitNOFILE=` for a systemd unit, or the pod's or "
            "Slurm's (`--propagate=NOFILE`) limits.",
            when="NCCL ran out of file descriptors",
        ),
        "launch_options": Fix(
            "Fix the option the message names in the torchrun command (`torchrun --help`): `--nnodes=MIN:MAX` or a "
            "number, `--rdzv-endpoint=host:port`, min_nodes <= max_nodes, a registered `--rdzv-backend`, "
            "`--nproc-per-node=gpu` only where GPUs are visible.",
            when="torchrun rejects its own options",
        ),
        "launcher_env": Fix(
            "Start the script with `torchrun --nnodes=N --nproc-per-node=G script.py` (or export RANK, WORLD_SIZE, "
            "LOCAL_RANK, MASTER_ADDR and MASTER_PORT per process in the srun/mpirun wrapper), or pass `rank=`, "
            "`world_size=` and `init_method=` to init_process_group explicitly.",
            when="the processes lack the launcher's environment",
        ),
        "match_arguments": Fix(
            "Make the launch command's arguments match the script's parser.",
            when="the script rejects other arguments",
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        found = pl.concat(
            [
                t.kinds(
                    K.duplicate_gpu, K.gpu_unavailable, K.launcher_args, K.launch_env_missing, K.launch_option_error
                ),
                t.kinds(K.fd_exhaustion).filter(pl.col("exhausted") == "nccl_fds"),
            ]
        )
        return pl.concat([found, more_processes_than_gpus(t)], how="diagonal_relaxed").sort(
            "ts", "source", "line", nulls_last=True
        )

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        dup = ev.filter(pl.col("kind") == K.duplicate_gpu)
        if not dup.is_empty():
            ranks = set(dup["subject_rank"].drop_nulls().to_list())
            ranks |= {int(p) for p in dup["peer"].drop_nulls() if str(p).isdigit()}
            culprits = tuple(sorted(ranks))
            device = dup["bus_id"].drop_nulls()
            on = f" (CUDA device {device[0]})" if device.len() else ""
            return self.finding(
                culprit_ranks=culprits,
                summary=f"{ranks_text(culprits).capitalize()} were given the same GPU{on}: NCCL refuses a "
                "communicator with two ranks on one device (Duplicate GPU detected).",
                explanation="The process group formed, but the rank-to-device mapping is wrong. The usual cause is "
                "a missing `torch.cuda.set_device(local_rank)`: a communicator created lazily (a sub-group, a "
                "device mesh) then lands on the default device of every process.",
                evidence=quotes(dup),
                fixes=self.fixes("set_device"),
                dont=("Do not retry on other nodes: the mapping is wrong everywhere.",),
                verify=("Each rank logs a different `cuda:N` / NCCL busId at init.",),
            )
        unavailable = ev.filter(pl.col("kind") == K.gpu_unavailable)
        if not unavailable.is_empty():
            culprits = tuple(sorted(set(unavailable["rank"].drop_nulls().to_list())))
            who = ranks_text(culprits).capitalize() if culprits else "A rank"
            # a device index beyond the GPUs the process sees (`invalid device ordinal`, torch's or NCCL's), unless
            # every line says it saw none (kinds.toml: `count` 0)
            none = (unavailable["count"] == 0).fill_null(False).all()
            what = (
                "found no GPU at all: its process sees none (a container without GPUs, a CPU build of torch, "
                "CUDA_VISIBLE_DEVICES empty, the driver not loaded)"
                if none
                else "asked for a GPU its process does not see (a device index beyond the visible GPUs): more "
                "processes per node than visible GPUs, or CUDA_VISIBLE_DEVICES hiding some"
            )
            return self.finding(
                culprit_ranks=culprits,
                summary=f"{who} {what}.",
                explanation="`torch.cuda.set_device(local_rank)` fails when local_rank is not below the number of "
                "GPUs the process sees: `--nproc_per_node` (or the launcher's process count) is larger than the "
                "node's GPUs, or `CUDA_VISIBLE_DEVICES` hides some of them; a process that sees none runs in a "
                "CPU-only container or wheel, or with `CUDA_VISIBLE_DEVICES` empty.",
                evidence=quotes(unavailable),
                fixes=self.fixes("see_gpus" if none else "set_device"),
                dont=("Do not look for a network or NCCL problem: the rank never got a GPU.",),
                verify=("`nvidia-smi -L` on the node lists at least `--nproc_per_node` GPUs.",),
            )
        options = ev.filter(pl.col("kind") == K.launch_option_error)
        if not options.is_empty():
            return self.finding(
                culprit_ranks=(),
                summary=f"torchrun rejected its launch options before starting any worker: "
                f"`{said(options['text'][0], t.line_prefix, 140)}`.",
                explanation="The launcher parses --nnodes, --rdzv-endpoint/--master-port, the rendezvous options and "
                "--nproc-per-node before anything runs; a malformed one stops it there. No worker, network or GPU "
                "is involved.",
                evidence=quotes(options),
                fixes=self.fixes("launch_options"),
                dont=("Do not look for a network or NCCL problem: nothing was started.",),
                verify=(
                    "The same command with the option fixed prints `Starting elastic_operator with launch configs`.",
                ),
            )
        no_env = ev.filter(pl.col("kind") == K.launch_env_missing)
        if not no_env.is_empty():
            names = sorted(set(no_env["var"].drop_nulls().to_list()))
            what = f" ({', '.join(names)} not set)" if names else ""
            return self.finding(
                culprit_ranks=tuple(sorted(set(no_env["rank"].drop_nulls().to_list()))),
                summary=f"The processes were started without a distributed launcher's environment{what}: "
                f"`{said(no_env['text'][0], t.line_prefix, 120)}`.",
                explanation="torch.distributed reads each process's rank, the world size and the store's address "
                "from variables torchrun (or srun/mpirun with them exported) sets; a script started with plain "
                "`python`, or by a launcher that does not set them, stops at init. No network or GPU is involved.",
                evidence=quotes(no_env),
                fixes=self.fixes("launcher_env"),
                dont=("Do not look for a network or NCCL problem: the processes never learnt who they are.",),
                verify=("`env | grep -E 'RANK|WORLD_SIZE|MASTER_'` inside a worker shows the variables.",),
            )
        no_fds = ev.filter(pl.col("exhausted") == "nccl_fds")
        if not no_fds.is_empty():
            culprits = tuple(sorted(set(no_fds["rank"].drop_nulls().to_list())))
            hosts = sorted(set(no_fds["host"].drop_nulls().to_list()))
            where = f" on {', '.join(hosts)}" if hosts else ""
            return self.finding(
                confidence=0.8,
                culprit_ranks=culprits,
                summary=f"NCCL ran out of file descriptors{where} (`{said(no_fds['text'][0], t.line_prefix, 120)}`): "
                "the processes' open-file limit is too low for the sockets NCCL opens.",
                explanation="NCCL opens sockets to its peers for the bootstrap, the proxy and every network "
                "channel; with many ranks per node, many communicators or a container's default limit (often "
                "1024), `accept`/`socket` fail with EMFILE and the communicator cannot form. The network and "
                "the GPUs are fine.",
                evidence=quotes(no_fds),
                fixes=self.fixes("open_files"),
                dont=("Do not debug the network: the sockets were refused by the process's own limit.",),
                verify=("`ulimit -n` inside the job (each rank's environment) prints the raised limit.",),
            )
        crowded = ev.filter(pl.col("nproc").is_not_null())
        if not crowded.is_empty():
            row = crowded.row(0, named=True)
            return self.finding(
                confidence=0.8,
                culprit_ranks=(),
                summary=f"The launch command starts {row['nproc']} processes per node but leaves "
                f"{row['visible']} GPU{'s' if row['visible'] != 1 else ''} visible "
                f"(`CUDA_VISIBLE_DEVICES={row['value']}`): ranks share a GPU or find none.",
                explanation="Each process takes the GPU of its local rank; with fewer visible GPUs than "
                "`--nproc_per_node`, a script that wraps the index (`local_rank % device_count()`) puts two ranks "
                "on one device (NCCL: `Duplicate GPU detected`) and one that does not fails with `invalid device "
                "ordinal`. Whatever the traceback, the command cannot work.",
                evidence=quotes(crowded),
                fixes=self.fixes("set_device"),
                dont=("Do not look for a network or NCCL problem: the launch command is inconsistent.",),
                verify=("`--nproc_per_node` equals the number of entries in `CUDA_VISIBLE_DEVICES`.",),
            )
        args = ev.filter(pl.col("kind") == K.launcher_args)
        exits_2 = t.elastic.filter(pl.col("exit_code") == 2)
        local_rank = args["value"].fill_null("").str.contains("--local[-_]rank").any()
        conf = self.base_confidence - (0.0 if local_rank or not exits_2.is_empty() else 0.1)
        return self.finding(
            confidence=conf,
            culprit_ranks=tuple(sorted(set(exits_2["rank"].drop_nulls().to_list()))),
            summary="The script rejected the launcher's arguments ("
            + args["detail"][0].strip()[:120]
            + "): every worker exits at start-up with status 2."
            + (
                " torch ≥ 2.0's launcher passes `--local-rank`; the script only accepts `--local_rank`."
                if local_rank
                else ""
            ),
            explanation="argparse prints `error: ...` and exits with status 2 before any distributed code runs; "
            "torchrun's failure summary then lists the workers with exitcode 2. No NCCL or hardware is involved.",
            evidence=quotes(args),
            fixes=self.fixes("local_rank_arg" if local_rank else "match_arguments"),
            dont=("Do not look for a network or GPU problem: the workers never got past argument parsing.",),
            verify=("`python train.py --help` lists every argument the launch command passes.",),
        )
