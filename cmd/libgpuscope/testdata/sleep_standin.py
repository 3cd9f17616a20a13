"""A stand-in for scripts/measure/sleep_torch.py, for the harness's tests
(cmd/libgpuscope's TestTheSleepHarness): it prints the events of a run
that meets every target, its machine marked "standin", so that no run of it
reads as a GPU's verdict. With SLEEP_STANDIN_HANG=FILE it writes its pid to
FILE and hangs, as a part the device stops would."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts", "measure"))
import sleep_report_test  # noqa: E402 - the made-up run of the report's tests


def main():
    hang = os.environ.get("SLEEP_STANDIN_HANG")
    if hang:
        print(json.dumps({"event": "machine", "standin": True}), flush=True)
        with open(hang + ".part", "w") as f:
            f.write(str(os.getpid()))
        os.rename(hang + ".part", hang)
        time.sleep(300)
    if sys.argv[1] == "tms":
        print(json.dumps({"event": "tms", "not_run": "a stand-in runs no torch_memory_saver"}))
    elif "--small" in sys.argv:
        print("========= ERROR SUMMARY: 0 errors")
        print(json.dumps({"event": "done"}))
    else:
        evs = sleep_report_test.good_run()
        evs[0]["standin"] = True
        for e in evs:
            print(json.dumps(e))


if __name__ == "__main__":
    main()
