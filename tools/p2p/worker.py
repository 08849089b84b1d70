"""P2P probe worker: runs with whatever python has torch (+CUDA) on the host, never imported
by the toolkit. The toolkit (probe.py) starts it in its own process group with a hard timeout
and judges the results; this script only moves data and reports digests.

  worker.py identity  --out F                      devices, UUIDs, driver, canAccessPeer matrix
  worker.py copy      --out F --sizes 131071,...   device-to-device copies, each ordered pair,
                                                   direct (peer) and staged through the host
  worker.py allreduce --out-dir D --elements ...   one process per device, NCCL all-reduce (SUM)
                      --port P                     (NCCL_P2P_DISABLE comes from the environment)

Every record is one JSON line, flushed as soon as it is known, so a hang still leaves the
records before it. Data patterns must match recipekit/tools/p2p/patterns.py (numpy side).
`--cpu-devices N` runs the same code on N virtual CPU devices with gloo (tests without a GPU).
Standard library + torch only.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import sys
import time
from typing import Any

MULT = 2654435761
SEED_MULT = 40503


def _emit(fh, **rec) -> None:
    fh.write(json.dumps(rec) + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def _devices(args):
    import torch  # lazy: pulls torch

    if args.cpu_devices:
        return [torch.device("cpu")] * args.cpu_devices
    return [torch.device("cuda", i) for i in range(torch.cuda.device_count())]


def _nvml_driver() -> str | None:
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        if nvml.nvmlInit_v2() != 0:
            return None
        buf = ctypes.create_string_buffer(96)
        ok = nvml.nvmlSystemGetDriverVersion(buf, 96) == 0
        nvml.nvmlShutdown()
        return buf.value.decode() if ok else None
    except OSError:
        return None


def byte_pattern(n: int, seed: int, device):
    """Bytes that differ per seed and do not repeat at any power-of-two period."""
    import torch  # lazy: pulls torch

    x = torch.arange(n, dtype=torch.int64, device=device) * MULT + seed * SEED_MULT
    return ((x >> 13) ^ x).bitwise_and(0xFF).to(torch.uint8)


def rank_values(n: int, rank: int, device):
    """Small integers as float32: their sum over ranks is exact, so it has one right answer."""
    import torch  # lazy: pulls torch

    i = torch.arange(n, dtype=torch.int64, device=device)
    return ((i * 7 + rank * 13) % 251 - 125).to(torch.float32)


def _digest(t) -> str:
    return hashlib.sha256(t.contiguous().cpu().numpy().tobytes()).hexdigest()


def cmd_identity(args) -> int:
    import torch  # lazy: pulls torch

    with open(args.out, "a") as fh:
        devs = _devices(args)
        info: dict[str, Any] = {
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "count": len(devs),
            "driver": None if args.cpu_devices else _nvml_driver(),
            "devices": [],
            "peer": [],
        }
        for i, d in enumerate(devs):
            if d.type == "cuda":
                p = torch.cuda.get_device_properties(i)
                info["devices"].append(
                    {
                        "index": i,
                        "name": p.name,
                        "uuid": str(getattr(p, "uuid", "")) or None,
                        "memory_mib": p.total_memory // (1 << 20),
                    }
                )
            else:
                info["devices"].append({"index": i, "name": "cpu", "uuid": f"cpu-{i}", "memory_mib": None})
        for i in range(len(devs)):
            info["peer"].append(
                [
                    None
                    if i == j
                    else (bool(torch.cuda.can_device_access_peer(i, j)) if devs[i].type == "cuda" else False)
                    for j in range(len(devs))
                ]
            )
        _emit(fh, event="identity", **info)
        _emit(fh, event="done")
    return 0


def _sync(devs) -> None:
    import torch  # lazy: pulls torch

    for d in {d for d in devs if d.type == "cuda"}:
        torch.cuda.synchronize(d)


def cmd_copy(args) -> int:
    import torch  # lazy: pulls torch

    sizes = [int(s) for s in args.sizes.split(",")]
    devs = _devices(args)
    with open(args.out, "a") as fh:
        for si, n in enumerate(sizes):
            for a in range(len(devs)):
                for b in range(len(devs)):
                    if a == b:
                        continue
                    seed = 1 + si * 1000 + a * 32 + b
                    src = byte_pattern(n, seed, devs[a])
                    for mode in ("peer", "staged"):
                        # Poison the destination so a copy that silently does nothing (or copies
                        # a stale buffer from the allocator's cache) cannot pass.
                        dst = torch.full((n,), 0x5A, dtype=torch.uint8, device=devs[b])
                        _sync(devs)
                        t0 = time.perf_counter()
                        if mode == "peer":
                            dst.copy_(src, non_blocking=False)
                        else:
                            dst.copy_(src.cpu())
                        _sync(devs)
                        dt = time.perf_counter() - t0
                        _emit(
                            fh,
                            event="copy",
                            src=a,
                            dst=b,
                            size=n,
                            seed=seed,
                            mode=mode,
                            sha256=_digest(dst),
                            seconds=dt,
                        )
                        del dst
                    del src
        _emit(fh, event="done")
    return 0


def _allreduce_rank(rank: int, args) -> None:
    import torch  # lazy: pulls torch
    import torch.distributed as dist  # lazy: pulls torch

    world = args.world
    if args.cpu_devices:
        backend, dev = "gloo", torch.device("cpu")
    else:
        backend, dev = "nccl", torch.device("cuda", rank)
        torch.cuda.set_device(dev)
    out = os.path.join(args.out_dir, f"rank{rank}.jsonl")
    with open(out, "a") as fh:
        _emit(
            fh,
            event="start",
            rank=rank,
            world=world,
            backend=backend,
            nccl_p2p_disable=os.environ.get("NCCL_P2P_DISABLE"),
        )
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=world)
        for n in (int(e) for e in args.elements.split(",")):
            t = rank_values(n, rank, dev)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            _emit(fh, event="allreduce", rank=rank, elements=n, sha256=_digest(t), seconds=time.perf_counter() - t0)
        dist.barrier()
        dist.destroy_process_group()
        _emit(fh, event="done", rank=rank)


def cmd_allreduce(args) -> int:
    import torch.multiprocessing as mp  # lazy: pulls torch

    args.world = len(_devices(args))
    if args.world < 2:
        with open(os.path.join(args.out_dir, "rank0.jsonl"), "a") as fh:
            _emit(fh, event="skip", reason=f"{args.world} device(s)")
        return 0
    mp.spawn(_allreduce_rank, args=(args,), nprocs=args.world, join=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("phase", choices=["identity", "copy", "allreduce"])
    ap.add_argument("--out")
    ap.add_argument("--out-dir")
    ap.add_argument("--sizes", default="")
    ap.add_argument("--elements", default="")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--cpu-devices", type=int, default=0)
    args = ap.parse_args(argv)
    return {"identity": cmd_identity, "copy": cmd_copy, "allreduce": cmd_allreduce}[args.phase](args)


if __name__ == "__main__":
    sys.exit(main())
