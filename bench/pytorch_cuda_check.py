#!/usr/bin/env python3
"""Replays eager traces through PyTorch's own CUDA caching allocator, on a CUDA GPU, and prints one
JSON object per trace: peak reserved bytes and driver allocations (cudaMalloc calls), the figures
`wgalloc replay` simulates as its `pytorch-cuda` baseline. It checks that simulation; it is not
part of the test suite (it needs PyTorch and an NVIDIA GPU).

Usage: python3 bench/pytorch_cuda_check.py TRACE_OR_FOLDER... > pytorch-cuda.jsonl
Set PYTORCH_CUDA_ALLOC_CONF as for any PyTorch program to replay under other allocator settings
(for example expandable_segments:True); the settings in force are printed first.
"""
import json
import os
import sys

import torch


def trace_files(args):
    for arg in args:
        if os.path.isdir(arg):
            for name in sorted(os.listdir(arg)):
                if name.endswith(".trace.json"):
                    yield os.path.join(arg, name)
        else:
            yield arg


def replay(path):
    with open(path) as f:
        events = json.load(f)["events"]
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.reset_accumulated_memory_stats()
    live, sizes = {}, {}
    current = peak_live = 0
    for e in events:
        key = str(e["id"])
        if e["op"] == "alloc":
            size = int(e["size"])
            # A zero-byte tensor allocates nothing in PyTorch; the simulation rounds it to 512 bytes.
            live[key] = torch.empty(max(size, 1), dtype=torch.uint8, device="cuda")
            sizes[key] = size
            current += size
            peak_live = max(peak_live, current)
        else:
            del live[key]
            current -= sizes.pop(key)
    live.clear()
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    return {
        "trace": os.path.basename(path).removesuffix(".trace.json"),
        "peakLiveBytes": peak_live,
        "peakReservedBytes": stats["reserved_bytes.all.peak"],
        "driverAllocations": stats["segment.all.allocated"],
        "retries": stats["num_alloc_retries"],
    }


def main():
    if not torch.cuda.is_available():
        sys.exit("pytorch_cuda_check: PyTorch sees no CUDA device")
    settings = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
    }
    print(json.dumps(settings), flush=True)
    for path in trace_files(sys.argv[1:]):
        print(json.dumps(replay(path)), flush=True)


if __name__ == "__main__":
    main()
