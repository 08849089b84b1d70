"""Card memory test, run under a Python with torch + CUDA (like the P2P probe's worker): for each visible card,
allocate its free memory in chunks, write a pattern unique to each chunk, read every chunk back only after all
are written (a card that maps two addresses to one cell shows it here), then time a device-to-device copy.
Prints one JSON object per card on stdout. Stops a card at its first error and frees everything it took.
Standalone on purpose: it runs in the engine's or the user's torch environment, not the toolkit's."""

from __future__ import annotations

import argparse
import json
import sys
import time


def test_card(torch, index: int, chunk_mib: int, deadline: float, reserve_mib: int, plant_fault: bool = False) -> dict:
    dev = torch.device("cuda", index)
    torch.cuda.set_device(dev)
    free, total = torch.cuda.mem_get_info(dev)
    out = {
        "index": index,
        "name": torch.cuda.get_device_name(dev),
        "reported_total_bytes": int(total),
        "reported_free_bytes": int(free),
        "allocated_bytes": 0,
        "verified_bytes": 0,
        "first_error": None,
        "stopped": "done",
        "copy_gbps": None,
    }
    n = chunk_mib * 1024 * 1024 // 4
    chunks: list = []
    try:
        budget = free - reserve_mib * 1024 * 1024
        while (len(chunks) + 1) * n * 4 <= budget:
            if time.monotonic() > deadline:
                out["stopped"] = "time"
                break
            try:
                t = torch.empty(n, dtype=torch.int32, device=dev)
            except RuntimeError as e:  # torch.OutOfMemoryError is a RuntimeError
                out["stopped"] = f"allocation refused: {str(e).splitlines()[0][:160]}"
                break
            seed = len(chunks) * 2654435761 % (1 << 31)
            torch.arange(n, dtype=torch.int32, device=dev, out=t)
            t.mul_(7).add_(seed)
            chunks.append((t, seed))
            out["allocated_bytes"] += n * 4
        if plant_fault and len(chunks) > 1:  # the test of the test: one chunk overwritten as an aliased card would
            chunks[len(chunks) // 2][0][:1024].fill_(-1)
        torch.cuda.synchronize(dev)
        piece = min(n, 16 * 1024 * 1024)  # read back in 64 MiB slices: the check needs little memory of its own
        for i, (t, seed) in enumerate(chunks):
            bad = 0
            for off in range(0, n, piece):
                expect = torch.arange(off, off + piece, dtype=torch.int32, device=dev).mul_(7).add_(seed)
                bad += int((t[off : off + piece] != expect).sum().item())
            if bad:
                out["first_error"] = {"chunk": i, "offset_bytes": i * n * 4, "mismatched_words": bad}
                break
            out["verified_bytes"] += n * 4
        chunks.clear()
        torch.cuda.empty_cache()
        size = min(1 << 30, max(1 << 20, int(torch.cuda.mem_get_info(dev)[0] // 4)))
        a = torch.empty(size, dtype=torch.uint8, device=dev)
        b = torch.empty_like(a)
        b.copy_(a)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        reps = 20
        start.record()
        for _ in range(reps):
            b.copy_(a)
        end.record()
        end.synchronize()
        seconds = start.elapsed_time(end) / 1000
        out["copy_gbps"] = round(2 * size * reps / seconds / 1e9, 1)  # read + write, as a copy moves it
        del a, b
    finally:
        chunks.clear()
        torch.cuda.empty_cache()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunk-mib", type=int, default=1024)
    ap.add_argument("--reserve-mib", type=int, default=512, help="left free for the CUDA context and the copy test")
    ap.add_argument("--timeout-s", type=float, default=300)
    ap.add_argument("--plant-fault", action="store_true", help="overwrite 1,024 words of one chunk: must be found")
    a = ap.parse_args()
    import torch  # lazy: pulls numpy, torch

    if not torch.cuda.is_available():
        print(json.dumps({"error": "torch sees no CUDA device"}))
        return 2
    deadline = time.monotonic() + a.timeout_s
    for i in range(torch.cuda.device_count()):
        print(json.dumps(test_card(torch, i, a.chunk_mib, deadline, a.reserve_mib, a.plant_fault)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
