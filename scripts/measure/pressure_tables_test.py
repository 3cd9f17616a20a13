"""Tests of pressure_tables.py --check on logs made up here, in the shapes
that pressure-gpu.sh writes: the verdict issue 38's next GPU run is read
by. cmd/gpumem's Go tests run it (python3 -m unittest pressure_tables_test,
in this folder); it needs no GPU."""
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import pressure_tables

PEAK = 1_000_000_000
STEP = PEAK // 1_000_000


def trace(t):
    return f"pool/testdata/shapes/{t}.csv.gz"


def gs(t, label, cap, ooms=0, reserved=None, step=STEP):
    reserved = reserved or cap
    return {"trace": trace(t), "label": label, "cap_bytes": cap, "step_bytes": step, "raised": 0, "ooms": ooms,
            "peak_requested_bytes": PEAK, "peak_reserved_bytes": reserved, "reserved_ratio": reserved / PEAK,
            "source_allocs": 7, "repetitions": [{"wall_ns": 2_000_000}, {"wall_ns": 1_000_000}]}


def torch(t, mode, cap, step=STEP):
    return {"trace": trace(t), "mode": "expandable_segments:True" if mode == "expandable" else mode,
            "peak_requested_bytes": PEAK, "peak_reserved_bytes": cap, "reserved_ratio": cap / PEAK,
            "first_ms": 3.0, "oom": 0, "smallest_cap_bytes": cap, "step_bytes": step}


def torch_free(t, mode, reserved):
    r = torch(t, mode, reserved)
    del r["smallest_cap_bytes"], r["step_bytes"]
    r["warm_ms"] = 1.0
    return r


def workload(t, cap=1_010_000_000, native=1_030_000_000, expandable=1_020_000_000,
             free=1_050_000_000, free_expandable=1_060_000_000):
    """The lines of one workload where every comparison holds."""
    return {
        "smallest_gpuscope.jsonl": [gs(t, "smallest", cap) for _ in range(3)] + [gs(t, "under", cap - STEP, ooms=1)],
        "smallest_torch.jsonl": [torch(t, "native", native), torch(t, "expandable", expandable)],
        "free_gpuscope.jsonl": [gs(t, "free", 0, reserved=free) for _ in range(3)],
        "free_torch.jsonl": [torch_free(t, m, r) for m, r in (("native", 1_200_000_000), ("expandable", free_expandable))
                             for _ in range(3)],
    }


class Check(unittest.TestCase):
    def folder(self, caps, *workloads, caps_step=True, runs=3, driver="cuda", notrun=()):
        """A run's folder: caps.txt, runs.txt (RUNS; None: none), driver.txt,
        notrun.txt (where notrun has lines) and the workloads' lines."""
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        with open(os.path.join(d, "caps.txt"), "w") as f:
            for t, cap in caps.items():
                f.write(f"{t} {cap} {STEP}\n" if caps_step else f"{t} {cap}\n")
        if runs is not None:
            with open(os.path.join(d, "runs.txt"), "w") as f:
                f.write(f"{runs}\n")
        with open(os.path.join(d, "driver.txt"), "w") as f:
            f.write(driver + "\n")
        if notrun:
            with open(os.path.join(d, "notrun.txt"), "w") as f:
                f.write("".join(n + "\n" for n in notrun))
        files = {}
        for w in workloads:
            for k, rows in w.items():
                files.setdefault(k, []).extend(rows)
        for k, rows in files.items():
            with open(os.path.join(d, k), "w") as f:
                for r in rows:
                    f.write(json.dumps(r) + "\n")
        return d

    def check(self, d):
        out = io.StringIO()
        status = pressure_tables.check(d, out)
        return status, out.getvalue().splitlines()

    def row(self, lines, what, t):
        found = [x for x in lines if x.split()[1:3] == [what, t]]
        self.assertEqual(len(found), 1, f"one {what} row for {t} in:\n" + "\n".join(lines))
        return found[0]

    def test_a_run_where_every_row_holds_passes(self):
        d = self.folder({"a": 1, "b": 1}, workload("a"), workload("b"))
        status, lines = self.check(d)
        self.assertEqual(status, 0, "\n".join(lines))
        self.assertTrue(self.row(lines, "cap", "a").startswith("PASS"))
        self.assertIn("gpuscope 1.010000 (3 runs, 0 out of memory), PyTorch native 1.030000, expandable 1.020000; "
                      "-10000000 bytes from expandable's, step 1000 (0.000001); one step under: out of memory",
                      self.row(lines, "cap", "a"))
        self.assertTrue(self.row(lines, "ratio", "b").startswith("PASS"))
        self.assertIn("gpuscope 1.050000, PyTorch expandable 1.060000 (medians of 3 and 3)", self.row(lines, "ratio", "b"))
        self.assertEqual(lines[-1], "VERDICT: PASS: 2 workloads, 4 rows: 4 PASS, 0 TIE, 0 FAIL")

    def test_an_out_of_memory_at_the_cap_fails(self):
        w = workload("a")
        w["smallest_gpuscope.jsonl"][1]["ooms"] = 1
        status, lines = self.check(self.folder({"a": 1}, w))
        self.assertEqual(status, 1)
        self.assertTrue(self.row(lines, "cap", "a").startswith("FAIL"))
        self.assertIn("(3 runs, 1 out of memory)", self.row(lines, "cap", "a"))
        self.assertTrue(lines[-1].startswith("VERDICT: FAIL"))

    def test_runs_that_ran_out_before_the_cap_was_raised_do_not_count(self):
        w = workload("a")
        w["smallest_gpuscope.jsonl"].insert(0, gs("a", "try", 1_010_000_000 - STEP, ooms=2))
        for r in w["smallest_gpuscope.jsonl"][1:4]:
            r["raised"] = 1
        status, lines = self.check(self.folder({"a": 1}, w))
        self.assertEqual(status, 0, "\n".join(lines))
        self.assertIn("1 steps over the simulator's cap", self.row(lines, "cap", "a"))

    def test_a_missing_workload_fails(self):
        d = self.folder({"a": 1, "c": 1}, workload("a"))
        status, lines = self.check(d)
        self.assertEqual(status, 1)
        self.assertIn("FAIL cap   c", self.row(lines, "cap", "c"))
        self.assertIn("missing: no line for gpuscope at its cap, PyTorch native, PyTorch expandable", self.row(lines, "cap", "c"))
        self.assertIn("missing: no unconstrained line for gpuscope, PyTorch expandable", self.row(lines, "ratio", "c"))

    def test_a_workload_without_one_pytorch_mode_fails(self):
        w = workload("a")
        del w["smallest_torch.jsonl"][0]
        status, lines = self.check(self.folder({"a": 1}, w))
        self.assertEqual(status, 1)
        self.assertIn("missing: no line for PyTorch native", self.row(lines, "cap", "a"))

    def test_a_ratio_above_expandables_fails(self):
        w = workload("a", free=1_060_000_000 + 2 * (1 << 20), free_expandable=1_060_000_000)
        status, lines = self.check(self.folder({"a": 1}, w))
        self.assertEqual(status, 1)
        self.assertTrue(self.row(lines, "ratio", "a").startswith("FAIL"))
        self.assertTrue(self.row(lines, "cap", "a").startswith("PASS"))

    def test_an_equal_ratio_is_a_tie_and_holds(self):
        status, lines = self.check(self.folder({"a": 1}, workload("a", free=1_060_000_000)))
        self.assertEqual(status, 0, "\n".join(lines))
        self.assertTrue(self.row(lines, "ratio", "a").startswith("TIE "))

    def test_a_cap_within_a_step_of_pytorchs_is_a_tie_and_holds(self):
        for over in (STEP, 1, 0, -STEP):
            w = workload("a", cap=1_020_000_000 + over)
            status, lines = self.check(self.folder({"a": 1}, w))
            self.assertEqual(status, 0, "\n".join(lines))
            self.assertTrue(self.row(lines, "cap", "a").startswith("TIE "), over)
            self.assertIn(f"{over:+d} bytes from expandable's, step 1000", self.row(lines, "cap", "a"))
            self.assertEqual(lines[-1], "VERDICT: PASS: 1 workloads, 2 rows: 1 PASS, 1 TIE, 0 FAIL")

    def test_a_cap_over_pytorchs_by_more_than_a_step_fails(self):
        status, lines = self.check(self.folder({"a": 1}, workload("a", cap=1_020_000_000 + STEP + 1)))
        self.assertEqual(status, 1)
        self.assertTrue(self.row(lines, "cap", "a").startswith("FAIL"))

    def test_the_smaller_of_pytorchs_modes_is_the_bar(self):
        # Under expandable, over native by 5 steps.
        w = workload("a", cap=1_015_000_000, native=1_015_000_000 - 5 * STEP, expandable=1_020_000_000)
        status, lines = self.check(self.folder({"a": 1}, w))
        self.assertEqual(status, 1)
        self.assertIn("FAIL cap", self.row(lines, "cap", "a"))
        self.assertIn("+5000 bytes from native's", self.row(lines, "cap", "a"))

    def test_the_coarser_step_of_the_two_sides_makes_the_tie(self):
        # PyTorch's lines from before torch_replay recorded its step: a
        # 10,000th of the peak.
        w = workload("a", cap=1_020_000_000 + 50_000)
        for r in w["smallest_torch.jsonl"]:
            del r["step_bytes"]
        status, lines = self.check(self.folder({"a": 1}, w))
        self.assertEqual(status, 0, "\n".join(lines))
        self.assertIn("TIE  cap", self.row(lines, "cap", "a"))
        self.assertIn("step 100000 (0.000100)", self.row(lines, "cap", "a"))

    def test_a_cap_that_fits_a_step_under_is_noted_not_failed(self):
        w = workload("a")
        w["smallest_gpuscope.jsonl"][3]["ooms"] = 0
        status, lines = self.check(self.folder({"a": 1}, w))
        self.assertEqual(status, 0, "\n".join(lines))
        self.assertIn("one step under: FITS, not the smallest", self.row(lines, "cap", "a"))

    def test_before_is_reported_and_not_a_gate(self):
        names = [f"train_large_vocab_s{i}" for i in range(1, 5)] + [f"infer_dynamic_logits_s{i}" for i in range(1, 5)]
        # Lines of a682b2e without their commit, as runs before c633d74's wrote them.
        lines = [gs(t, label, 1_020_000_000, ooms=int(label == "before" and t != names[0]))
                 for t in names for label in ("before", "today")]
        gpt2 = ["gpt2_train", "train_held_outputs", "train_held_outputs_s2"]
        lines += [dict(gs(t, label, 1_020_000_000, ooms=int(label == "before")), commit="c633d74")
                  for t in gpt2 for label in ("before", "today")]
        status, lines = self.check(self.folder({"a": 1}, workload("a"), {"before_gpuscope.jsonl": lines}))
        self.assertEqual(status, 0, "\n".join(lines))
        note = [x for x in lines if x.startswith("NOTE before")]
        self.assertEqual(len(note), 2, "\n".join(lines))
        self.assertIn("gpumem at a682b2e (before the largest blocks' pages, c2db750) ran out of memory on 7 of 8 files",
                      note[0])
        self.assertIn("today's pool on 0 (none)", note[0])
        self.assertIn("gpumem at c633d74 (before the pages for blocks of a handle or more) ran out of memory on 3 of 3 "
                      "files (gpt2_train, train_held_outputs, train_held_outputs_s2); today's pool on 0 (none)", note[1])

    def test_the_tables_and_the_check_read_the_folder_alone(self):
        # A caps.txt of two columns (runs before the step was written) and
        # lines without cap_bytes: caps.txt's cap, the old step.
        w = workload("a", cap=1_020_000_000 + 50_000)
        for r in w["smallest_gpuscope.jsonl"]:
            del r["cap_bytes"], r["step_bytes"]
        d = self.folder({"a": 1_020_000_000 + 50_000}, w, caps_step=False)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            pressure_tables.main(d)
        self.assertIn("| a | 1.02005", out.getvalue())
        status, lines = self.check(d)
        self.assertEqual(status, 0, "\n".join(lines))
        self.assertIn("TIE  cap", self.row(lines, "cap", "a"))

    def test_a_caps_txt_without_workloads_fails(self):
        status, lines = self.check(self.folder({}))
        self.assertEqual(status, 1, "\n".join(lines))
        self.assertIn("FAIL caps  -", self.row(lines, "caps", "-"))
        self.assertIn("caps.txt lists no workloads", self.row(lines, "caps", "-"))
        self.assertEqual(lines[-1], "VERDICT: FAIL: 0 workloads, 1 rows: 0 PASS, 0 TIE, 1 FAIL")

    def test_a_stand_in_run_is_no_gpu_verdict(self):
        # The simulated source played the GPU (pressure-gpu.sh built with
        # DRIVER=sim): rows that hold, or not, are no GPU's verdict.
        for w, verdict in ((workload("a"), "PASS"), (workload("a", cap=1_030_000_000), "FAIL")):
            status, lines = self.check(self.folder({"a": 1}, w, driver="sim"))
            self.assertEqual(status, 2, "\n".join(lines))
            self.assertTrue(lines[0].startswith("STAND-IN: the simulated source played the GPU"), lines[0])
            self.assertTrue(lines[-1].startswith(f"STAND-IN VERDICT: {verdict}: 1 workloads"), lines[-1])

    def test_fewer_runs_at_the_cap_than_asked_for_fail(self):
        w = workload("a")
        del w["smallest_gpuscope.jsonl"][1:3]
        status, lines = self.check(self.folder({"a": 1}, w))
        self.assertEqual(status, 1, "\n".join(lines))
        self.assertTrue(self.row(lines, "cap", "a").startswith("FAIL"))
        self.assertIn("(1 runs, 0 out of memory)", self.row(lines, "cap", "a"))
        self.assertIn("1 runs at the cap, the run asked for 3 (runs.txt)", self.row(lines, "cap", "a"))
        # One run where the run asked for one holds.
        status, lines = self.check(self.folder({"a": 1}, w, runs=1))
        self.assertEqual(status, 0, "\n".join(lines))
        self.assertTrue(self.row(lines, "cap", "a").startswith("PASS"))
        # More than asked for is not what the run did either.
        status, lines = self.check(self.folder({"a": 1}, workload("a"), runs=2))
        self.assertEqual(status, 1, "\n".join(lines))
        self.assertIn("3 runs at the cap, the run asked for 2", self.row(lines, "cap", "a"))

    def test_a_folder_without_the_runs_asked_for_fails(self):
        status, lines = self.check(self.folder({"a": 1}, workload("a"), runs=None))
        self.assertEqual(status, 1, "\n".join(lines))
        self.assertTrue(self.row(lines, "cap", "a").startswith("FAIL"))
        self.assertIn("runs.txt missing", self.row(lines, "cap", "a"))

    def test_a_bad_runs_txt_says_so(self):
        d = self.folder({"a": 1}, workload("a"), runs="three")
        with self.assertRaisesRegex(SystemExit, "runs.txt: want the count of runs asked for"):
            pressure_tables.check(d, io.StringIO())

    def test_parts_not_run_are_listed(self):
        notrun = ["cap20: skipped, 481 s gone of BUDGET=480", "free: stopped by TERM at free_gpuscope.jsonl"]
        status, lines = self.check(self.folder({"a": 1}, workload("a"), notrun=notrun))
        self.assertEqual(status, 0, "\n".join(lines))
        self.assertEqual([x for x in lines if x.startswith("NOT RUN")], ["NOT RUN: " + n for n in notrun])
        self.assertEqual(lines[-1], "VERDICT: PASS: 1 workloads, 2 rows: 2 PASS, 0 TIE, 0 FAIL; "
                                    "2 parts not run (NOT RUN above)")

    def test_a_folder_without_caps_says_so(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        with self.assertRaisesRegex(SystemExit, "caps.txt: missing"):
            pressure_tables.check(d, io.StringIO())

    def test_the_command_exits_with_the_verdict(self):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pressure_tables.py")
        ok = self.folder({"a": 1}, workload("a"))
        bad = self.folder({"a": 1, "c": 1}, workload("a"))
        empty = self.folder({})
        standin = self.folder({"a": 1}, workload("a"), driver="sim")
        for d, want, verdict in ((ok, 0, "\nVERDICT: PASS"), (bad, 1, "\nVERDICT: FAIL"), (empty, 1, "\nVERDICT: FAIL"),
                                 (standin, 2, "\nSTAND-IN VERDICT: PASS")):
            p = subprocess.run([sys.executable, script, "--check", d], capture_output=True, text=True)
            self.assertEqual(p.returncode, want, p.stdout + p.stderr)
            self.assertIn(verdict, p.stdout)


if __name__ == "__main__":
    unittest.main()
