"""Writes a synthetic allocation trace of N events (default 10,000,000) to
standard output, gzip-compressed, in the format of docs/trace-format.md: a
working set of 2,000 live tensors whose slots are freed and allocated again
with sizes from 512 B to 64 MiB, on one stream, seeded so that every run
writes the same bytes. For measuring what a replay costs on a trace far
longer than those in cmd/gpumem/testdata:

    python3 scripts/measure/long_trace.py 10000000 > /tmp/long.csv.gz
    /usr/bin/time -v go run ./cmd/gpumem replay /tmp/long.csv.gz
"""
import gzip
import random
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_000
rng = random.Random(14)
out = gzip.GzipFile(fileobj=sys.stdout.buffer, mode="wb", compresslevel=1)
write = out.write
write(b"action,addr,size,stream\n")
slots = 2000
live = [None] * slots
events = 0
base = 1 << 40
lines = []
while events < n:
    i = rng.randrange(slots)
    if live[i] is not None:
        addr, size = live[i]
        lines.append(b"free_requested,%d,%d,0\n" % (addr, size))
        live[i] = None
    else:
        size = int(512 * 2 ** rng.uniform(0, 17))  # 512 B to 64 MiB, log-uniform
        addr = base + i * (1 << 27)
        lines.append(b"alloc,%d,%d,0\n" % (addr, size))
        live[i] = (addr, size)
    events += 1
    if len(lines) >= 100_000:
        write(b"".join(lines))
        lines.clear()
write(b"".join(lines))
out.close()
