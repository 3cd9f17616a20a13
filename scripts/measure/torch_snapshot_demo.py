# Records a small PyTorch workload's memory history and dumps the snapshot,
# to check scripts/torch2trace.py end to end on a GPU machine:
#   python3 scripts/measure/torch_snapshot_demo.py snap.pickle
#   python3 scripts/torch2trace.py snap.pickle > trace.csv && gpumem replay trace.csv
import sys, torch
torch.cuda.memory._record_memory_history(max_entries=100000)
x = [torch.empty(n * 1024 * 1024, dtype=torch.uint8, device="cuda") for n in (1, 3, 64, 5)]
del x[1]
y = torch.empty(100 * 1024 * 1024, dtype=torch.uint8, device="cuda")
del x, y
z = [torch.randn(256, 256, device="cuda") @ torch.randn(256, 256, device="cuda") for _ in range(5)]
torch.cuda.synchronize()
torch.cuda.memory._dump_snapshot(sys.argv[1])
