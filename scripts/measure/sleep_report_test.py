"""Tests of sleep_report.py on made-up logs: what sleep-gpu.sh's verdict
says of each target, met, missed or not run. cmd/libgpuscope's
TestTheSleepHarness runs them."""
import copy
import json
import os
import tempfile
import unittest

import sleep_report

GiB = 1 << 30
HELD = 10 * GiB + (64 << 20)


def figures(free, reserved, released=0, kept=0, pinned=0):
    return {"driver_free": free, "driver_total": 80 * GiB, "reserved": reserved, "allocated": 0, "sleeping": 0,
            "sleeping_released": released, "sleeping_kept": kept, "pinned_allocated": 0, "pinned_cached": pinned,
            "sleeps": 0, "wakes": 0}


def good_run(cycles=20):
    """The events of a run that meets every target."""
    evs = [
        {"event": "machine", "gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11"},
        {"event": "bandwidth", "dtoh": 50e9, "htod": 50e9},
        {"event": "model", "weights_bytes": 10 * GiB, "layers": 40},
        {"event": "sleep", "cycle": 0, "seconds": 3.0, "before": figures(GiB, HELD),
         "after": figures(GiB + HELD, 0, released=HELD, kept=HELD, pinned=0)},
        {"event": "borrow", "bytes": int(HELD * 0.95), "by": "cupy", "driver_free_before_sleep": GiB,
         "driver_free_while_borrowed": GiB + HELD - int(HELD * 0.95)},
        {"event": "wake", "cycle": 0, "seconds": 0.3, "after": figures(GiB, HELD, pinned=HELD)},
        {"event": "check", "cycle": 0, "same_ptrs": True, "same_output": True},
    ]
    for c in range(1, cycles + 1):
        evs.append({"event": "cycle", "cycle": c, "sleep_seconds": 0.25, "wake_seconds": 0.25,
                    "asleep": figures(GiB + HELD, 0, released=HELD, kept=HELD, pinned=0),
                    "awake": figures(GiB, HELD, pinned=HELD)})
    evs += [
        {"event": "check", "cycle": cycles, "same_ptrs": True, "same_output": True},
        {"event": "discard", "sleep_seconds": 0.01, "wake_seconds": 0.02, "bytes": GiB, "same_ptr": True, "zeros": True},
        {"event": "free_asleep", "bytes": 256 << 20, "sleeping_drop": 256 << 20, "released_drop": 256 << 20, "failures": 0,
         "same_ptr": True, "kept": True},
        {"event": "done", "stats": figures(GiB, 0)},
    ]
    return evs


class Report(unittest.TestCase):
    def write(self, evs, tms=None, sanitizer="========= ERROR SUMMARY: 0 errors\n" + json.dumps({"event": "done"}) + "\n",
              extra=None):
        d = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(d))
        with open(os.path.join(d, "gpuscope.jsonl"), "w") as f:
            f.write("some stderr noise\n" + "".join(json.dumps(e) + "\n" for e in evs))
        if tms is not None:
            with open(os.path.join(d, "tms.jsonl"), "w") as f:
                f.write(json.dumps(tms) + "\n")
        if sanitizer is not None:
            with open(os.path.join(d, "sanitizer.txt"), "w") as f:
                f.write(sanitizer)
        for name, text in (extra or {}).items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        return sleep_report.report(d)

    def assertLine(self, out, prefix, part):
        hits = [x for x in out if x.startswith(prefix) and part in x]
        self.assertTrue(hits, f"no line {prefix}...{part} in:\n" + "\n".join(out))

    def test_a_run_that_meets_every_target_passes(self):
        out, status = self.write(good_run(), tms={"event": "tms", "not_run": "torch_memory_saver is not installed"})
        self.assertEqual(status, 0, "\n".join(out))
        self.assertEqual(out[-1], "VERDICT: PASS")
        self.assertLine(out, "PASS ", "free memory rose by")
        self.assertLine(out, "PASS ", "20 cycles hold flat")
        self.assertLine(out, "PASS ", "freed asleep: what sleeps went down by 0.27 GB, 0 failures")
        self.assertLine(out, "PASS ", "of the link")
        self.assertLine(out, "NOT RUN ", "torch_memory_saver is not installed")
        self.assertLine(out, "PASS ", "compute-sanitizer")

    def test_each_missed_target_fails(self):
        def broken(change):
            evs = good_run()
            change(evs)
            return self.write(evs)
        cases = {
            "weights": lambda e: e[2].update(weights_bytes=9 * GiB),
            "sleep gave": lambda e: e[3]["after"].update(driver_free=GiB + int(HELD * 0.98)),
            "while asleep": lambda e: e[4].update(bytes=GiB // 2),
            "after the first wake": lambda e: e[6].update(same_ptrs=False),
            "after 20 cycles": lambda e: e[-4].update(same_output=False),
            "cycles hold flat": lambda e: e[10]["awake"].update(driver_free=GiB - (128 << 20)),
            "KV cache": lambda e: e[-3].update(zeros=False),
            "freed asleep": lambda e: e[-2].update(failures=1),
            "with its bytes": lambda e: e[-2].update(kept=False),
            "wake keeping": lambda e: [c.update(wake_seconds=1.0) for c in e if c.get("event") == "cycle"],
        }
        for what, change in cases.items():
            with self.subTest(what):
                out, status = broken(change)
                self.assertEqual(status, 1, "\n".join(out))
                self.assertLine(out, "FAIL ", what)
                self.assertEqual(out[-1], "VERDICT: FAIL")

    def test_what_did_not_run_fails_but_torch_memory_saver(self):
        out, status = self.write(good_run()[:3])
        self.assertEqual(status, 1)
        self.assertLine(out, "NOT RUN ", "sleep: the run did not sleep")
        out, status = self.write(good_run(), sanitizer=None, extra={"notrun.txt": "sanitizer.txt: 10 s of the budget left\n"})
        self.assertEqual(status, 1)
        self.assertLine(out, "NOT RUN ", "compute-sanitizer: not run")
        self.assertLine(out, "NOT RUN ", "sanitizer.txt: 10 s of the budget left")

    def test_compute_sanitizer_errors_and_runs_cut_short_fail(self):
        out, status = self.write(good_run(), sanitizer="========= ERROR SUMMARY: 3 errors\n")
        self.assertEqual(status, 1)
        self.assertLine(out, "FAIL ", "3 errors, the run did not complete")
        out, status = self.write(good_run(), extra={"failures.txt": "gpuscope.jsonl exited 124 after 280 s, at the budget's end\n"})
        self.assertEqual(status, 1)
        self.assertLine(out, "FAIL ", "at the budget's end")
        evs = good_run() + [{"event": "error", "mode": "gpuscope", "error": "GpuscopeError: wake failed"}]
        out, status = self.write(evs)
        self.assertLine(out, "FAIL ", "wake failed")

    def test_torch_memory_saver_where_installed_is_shown(self):
        out, status = self.write(good_run(), tms={"event": "tms", "sleep_seconds": [2.0, 0.3, 0.4], "wake_seconds": [0.5, 0.3, 0.3],
                                                   "weights_bytes": 10 * GiB, "same_output": True})
        self.assertEqual(status, 0)
        self.assertLine(out, "INFO ", "torch_memory_saver (enable_cpu_backup)")

    def test_a_stand_in_is_no_verdict(self):
        evs = copy.deepcopy(good_run())
        evs[0]["standin"] = True
        out, status = self.write(evs)
        self.assertEqual(status, 2)
        self.assertTrue(out[-1].startswith("STAND-IN VERDICT: PASS"), out[-1])


if __name__ == "__main__":
    unittest.main()
