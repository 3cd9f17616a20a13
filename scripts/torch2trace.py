"""Converts a PyTorch CUDA memory snapshot taken with history into the
trace format gpumem reads (docs/trace-format.md), so that a PyTorch
workload can be replayed and plotted through gpuscope's pool:

    # in the PyTorch program
    torch.cuda.memory._record_memory_history(max_entries=10_000_000)
    ...  # the workload
    torch.cuda.memory._dump_snapshot("snapshot.pickle")

    python3 scripts/torch2trace.py snapshot.pickle > trace.csv
    gpumem replay trace.csv
    gpumem plot -o trace.html trace.csv

Only the standard library: the pickle holds plain dicts and lists. With
several devices, --device N picks one (default: the first with events).
"""
import argparse
import csv
import pickle
import sys

ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "snapshot", "oom"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("snapshot", help="a pickle from torch.cuda.memory._dump_snapshot")
    ap.add_argument("--device", type=int, default=None, help="the device's index in the snapshot")
    args = ap.parse_args()
    with open(args.snapshot, "rb") as f:
        snap = pickle.load(f)
    traces = snap.get("device_traces") or []
    if args.device is None:
        picked = next((i for i, t in enumerate(traces) if t), None)
    else:
        picked = args.device if args.device < len(traces) else None
    if picked is None:
        sys.exit("torch2trace: the snapshot has no history; record it with "
                 "torch.cuda.memory._record_memory_history() before the workload")
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(["action", "addr", "size", "stream"])
    skipped = 0
    for e in traces[picked]:
        action = e.get("action")
        if action not in ACTIONS:
            skipped += 1
            continue
        out.writerow([action, int(e.get("addr", 0)), int(e.get("size", 0)), int(e.get("stream", 0))])
    if skipped:
        print(f"torch2trace: skipped {skipped} events of unknown actions", file=sys.stderr)


if __name__ == "__main__":
    main()
