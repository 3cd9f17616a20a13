"""Replays an allocation trace (CSV: action,addr,size,stream; plain or gzip)
through PyTorch's caching allocator on the GPU and writes, after every alloc
and free, the trace line and the bytes requested and reserved then, as CSV
on standard output: the PyTorch side of the reserved-memory plots in
docs/pool.md. Reading memory_reserved() after every event slows the replay,
so time it with scripts/measure/torch.sh, not with this.

    python3 scripts/measure/torch_timeline.py TRACE.csv.gz > timeline.csv
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 scripts/measure/torch_timeline.py TRACE.csv.gz > t.csv
"""
import csv
import gzip
import sys

import torch

path = sys.argv[1]
opener = gzip.open if path.endswith(".gz") else open
torch.cuda.init()
dev = torch.cuda.current_device()
streams = {0: torch.cuda.default_stream()}
live, requested = {}, 0
out = csv.writer(sys.stdout, lineterminator="\n")
out.writerow(["line", "requested_bytes", "reserved_bytes"])
with opener(path, "rt") as f:
    for n, row in enumerate(csv.reader(f), start=1):
        if n == 1 and row[0] == "action":
            continue
        action, addr, size, stream = row[0], int(row[1]), int(row[2]), int(row[3])
        if action == "alloc":
            if stream not in streams:
                streams[stream] = torch.cuda.Stream()
            live[addr] = (torch.cuda.caching_allocator_alloc(size, dev, streams[stream]), size)
            requested += size
        elif action == "free_requested" and addr in live:
            ptr, size = live.pop(addr)
            torch.cuda.caching_allocator_delete(ptr)
            requested -= size
        else:
            continue
        out.writerow([n, requested, torch.cuda.memory_reserved(dev)])
