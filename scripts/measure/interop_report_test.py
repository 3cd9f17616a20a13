"""Tests of interop_report.py on logs made up here, in the shapes that
interop_torch.py, interop_cupy.py and interop_streams.py print: the
verdicts the next GPU run is read by. cmd/libgpuscope's Go tests run it
(python3 -m unittest interop_report_test, in this folder); it needs no GPU.
"""
import json
import os
import tempfile
import unittest

import interop_report


LOSSES = tuple(float.hex(1 + i / 64) for i in range(60))  # the harness's 60 steps


def torch_row(mode, rnd, step_ms, losses=LOSSES):
    return {"mode": mode, "round": rnd, "steps": len(losses), "timed_steps": 10, "tokens": 1, "step_ms": step_ms,
            "step_ms_each": [step_ms] * 10, "peak_reserved": {"native": 9e9}.get(mode, 3e9),
            "peak_allocated": 2e9, "final_loss": 1.5, "losses": list(losses)}


def streams_row(mode, landed, busy=True, calls=None, failures=0, onto="side"):
    return {"mode": mode, "onto": onto, "record_stream_calls": (1 if mode == "wired" else 0) if calls is None else calls,
            "late_stream_busy_after_the_allocations": busy, "allocations_ms": 3.2,
            "a_new_tensor_took_its_address": landed, "late_write_landed_in_a_new_tensor": landed,
            "c_failures": failures}


def cupy_row(mode, rnd, t, digest="d"):
    return {"mode": mode, "round": rnd, "ops": 4, "passes": 1, "pass_ms": [t], "pass_ms_min": t,
            "peak_reserved": {"pool": 2e9, "gpuscope": 1e9}[mode], "digest": digest}


def pair_row(allocator, size, ns):
    return {"allocator": allocator, "size": size, "pairs": 1000, "rounds": 7, "median_ns": ns, "min_ns": ns, "max_ns": ns}


def pyalloc_row(mode, ns):
    return {"mode": mode, "pairs": 100, "rounds": 3,
            **{str(s): {"median_ns": ns, "min_ns": ns, "max_ns": ns} for s in (256, 1 << 20, 64 << 20)}}


def cupy_pair_row(ns):
    """interop_cupy.py pair's line: ns gives each allocator's median, the
    same at every size."""
    row = {"kind": "cupy_pair", "pairs": 100, "rounds": 3}
    for s in (256, 1 << 20, 64 << 20):
        row[str(s)] = {k: {"median_ns": v, "min_ns": v, "max_ns": v} for k, v in ns.items()}
        row[str(s)]["gpuscope"].update(pair_hits=300, pair_allocs=300, allocs=0, c_failures=0)
    return row


def both_row(**kw):
    """interop_both.py's first JSON line, of a run whose cap bound and
    whose CuPy raised its own error with gpuscope's message."""
    r = {"cap": 2 << 30, "chunk": 128 << 20, "reserved": 2.1e9, "peak_reserved": 2.1e9, "allocated": 2.0e9,
         "filled": 8, "cupy_past_cap": "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 134,217,728 bytes",
         "cupy_oom_is_cupys": True, "cupy_message_names_the_cap": True, "both_named": True, "under_cap": True}
    r.update(kw)
    if r["cupy_past_cap"] is None:
        del r["cupy_past_cap"]
    return r


def torch_past(**kw):
    """interop_both.py's later lines: PyTorch past the cap, and after."""
    r = {"torch_past_cap": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 134217728 bytes",
         "torch_oom_is_torchs": True, "torch_message_names_the_cap": True}
    r.update(kw)
    return r


AFTER = {"cupy_after": True, "torch_after": True, "step_after": True, "went_on": True}


def server_row(**kw):
    """interop_server.py's line, of a run that met every check."""
    r = {"backend": "torch", "threads": 4, "requests": 24, "kinds": {"train": 12, "infer": 12},
         "each_in_its_own_scope": True, "mismatched": [], "summaries_name_the_four": True, "ended_cleanly": True,
         "allocated_before": 5e8, "allocated_after": 5e8, "c_failures": 0, "errors": []}
    r.update(kw)
    return r


def hooks_row(**kw):
    """interop_hooks.py's line, of a run whose hooks all acted."""
    r = {"empty_cache": {"reserved_before": 1.1e9, "reserved_after": 2e6, "acted": True},
         "memory_fraction": {"fraction": 0.1, "past": "torch.cuda.OutOfMemoryError: CUDA out of memory", "past_refused": True,
                             "under_allowed": True, "acted": True},
         "graph_capture": {"refused": True, "message": "gpuscope keeps no private memory pool (device 0): ..."}}
    for k, v in kw.items():
        r[k] = dict(r[k], **v)
    return r


class Report(unittest.TestCase):
    def logs(self, files):
        d = tempfile.mkdtemp()
        self.addCleanup(lambda: [os.remove(os.path.join(d, f)) for f in os.listdir(d)] and os.rmdir(d))
        for name, rows in files.items():
            with open(os.path.join(d, name), "w") as f:
                for r in rows:
                    f.write((json.dumps(r) if isinstance(r, dict) else r) + "\n")
        return interop_report.report(d)

    def line(self, out, start):
        found = [x for x in out if x.strip().startswith(start)]
        self.assertEqual(len(found), 1, f"one line starting {start!r} in:\n" + "\n".join(out))
        return found[0]

    def section(self, out, title):
        """The lines of the part of the report whose first line starts with
        title, up to the blank line after it."""
        i = next(k for k, x in enumerate(out) if x.startswith(title))
        j = next((k for k in range(i, len(out)) if not out[k].strip()), len(out))
        return out[i:j]

    def test_step_time_verdict_is_of_the_medians(self):
        # Native's rounds differ by 10%; the medians are 100 and 101.5.
        rows = [torch_row("native", 0, 95.0), torch_row("expandable", 0, 99.0), torch_row("gpuscope", 0, 101.5),
                torch_row("expandable", 1, 100.0), torch_row("gpuscope", 1, 112.0), torch_row("native", 1, 104.5),
                torch_row("gpuscope", 2, 96.0), torch_row("native", 2, 100.0), torch_row("expandable", 2, 101.0)]
        out = self.logs({"torch.jsonl": rows})
        self.assertIn("1.0150 (target <= 1.02) -> met", self.line(out, "step time gpuscope / native, medians"))
        self.assertIn("median of 3: 95.00, 104.50, 100.00; spread 9.5%", self.line(out, "native     step"))
        self.assertIn("1.0684, 1.0718, 0.9600", self.line(out, "the same within each round"))
        self.assertIn("9.5%", self.line(out, "native's own spread"))
        self.assertIn("-> met", self.line(out, "losses of 60 steps"))
        self.assertIn("-> met", self.line(out, "peak reserved gpuscope"))

        rows[2]["step_ms"] = rows[8]["step_ms"] = 103.0  # gpuscope's median 103: 1.03
        rows[8] = torch_row("gpuscope", 2, 103.0)
        out = self.logs({"torch.jsonl": rows})
        self.assertIn("1.0300 (target <= 1.02) -> MISSED", self.line(out, "step time gpuscope / native, medians"))

    def test_a_loss_that_differs_is_missed(self):
        rows = [torch_row("native", 0, 100.0), torch_row("gpuscope", 0, 100.0, losses=LOSSES[:-1] + ("0x1.9p+0",))]
        out = self.logs({"torch.jsonl": rows})
        self.assertIn("-> MISSED", self.line(out, "losses of 60 steps"))

    def test_fewer_steps_than_the_issue_asks_are_missed(self):
        # A quick run's 12 steps, the same in every mode, are not the
        # issue's 50.
        rows = [torch_row(k, 0, 100.0, losses=LOSSES[:12]) for k in ("native", "expandable", "gpuscope")]
        out = self.logs({"torch.jsonl": rows})
        self.assertIn("MISSED: 12 steps, under the issue's 50", self.line(out, "losses of 12 steps"))
        rows = [torch_row(k, 0, 100.0) for k in ("native", "expandable", "gpuscope")]
        self.assertIn("-> met", self.line(self.logs({"torch.jsonl": rows}), "losses of 60 steps"))

    def test_record_stream_met_where_the_control_fails(self):
        for onto in ("side", "default"):
            out = self.logs({"streams.jsonl": [streams_row("wired", False, onto=onto), streams_row("unwired", True, onto=onto)]})
            part = self.section(out, f"record_stream onto the {onto} stream")
            self.assertEqual("  -> met", self.line(part, "-> "))
            self.assertIn("the check can fail, as it should", self.line(part, "unwired"))

    def test_record_stream_onto_each_stream_has_its_own_verdict(self):
        # The side stream met; the default stream's run (FSDP's pattern)
        # did not run, or reused the block: each says so on its own.
        side = [streams_row("wired", False), streams_row("unwired", True)]
        out = self.logs({"streams.jsonl": side})
        self.assertEqual("  -> met", self.line(self.section(out, "record_stream onto the side stream"), "-> "))
        self.assertIn("MISSED, NOT RUN", self.line(self.section(out, "record_stream onto the default stream"), "wired"))
        out = self.logs({"streams.jsonl": side + [streams_row("wired", True, onto="default"),
                                                 streams_row("unwired", True, onto="default")]})
        self.assertIn("MISSED: memory recorded on the late stream was reused",
                      self.line(self.section(out, "record_stream onto the default stream"), "-> "))

    def test_record_stream_verdicts_that_are_no_pass(self):
        cases = [
            (streams_row("wired", True), "MISSED: memory recorded on the late stream was reused"),
            (streams_row("wired", False, busy=False), "INCONCLUSIVE"),
            (streams_row("wired", False, calls=0), "MISSED: the hook did not reach gpuscope"),
            (streams_row("wired", False, failures=1), "MISSED: the hook did not reach gpuscope"),
        ]
        for row, want in cases:
            out = self.section(self.logs({"streams.jsonl": [row, streams_row("unwired", True)]}), "record_stream onto the side")
            self.assertIn(want, self.line(out, "-> "))
        out = self.section(self.logs({"streams.jsonl": [streams_row("wired", False), streams_row("unwired", False)]}),
                           "record_stream onto the side")
        self.assertIn("did NOT show that it can fail", self.line(out, "unwired"))

    def test_record_stream_is_inconclusive_without_a_control_that_failed(self):
        # The wired run passed, but nothing showed that the check can fail:
        # the control's late write did not land, or the control gave no result.
        side = "record_stream onto the side"
        out = self.section(self.logs({"streams.jsonl": [streams_row("wired", False), streams_row("unwired", False)]}), side)
        self.assertIn("INCONCLUSIVE: the control's late write did not land", self.line(out, "-> "))
        out = self.section(self.logs({"streams.jsonl": [streams_row("wired", False)], "streams.jsonl.err": ["", "Killed"]}), side)
        self.assertIn("INCONCLUSIVE: the control gave no result", self.line(out, "-> "))
        self.assertIn("no result (stderr: Killed)", self.line(out, "unwired"))
        # A wired run that missed stays MISSED, whatever the control did.
        out = self.section(self.logs({"streams.jsonl": [streams_row("wired", True)]}), side)
        self.assertIn("MISSED: memory recorded on the late stream was reused", self.line(out, "-> "))

    def test_record_stream_prints_when_the_late_stream_was_busy(self):
        row = streams_row("wired", False)
        row["late_stream_busy_after_the_del"] = True
        out = self.section(self.logs({"streams.jsonl": [row, streams_row("unwired", True)]}), "record_stream onto the side")
        self.assertIn("busy after the del, busy after the allocations", self.line(out, "wired:"))

    def test_what_did_not_run_says_so(self):
        out = self.logs({"streams.jsonl.err": ["", "RuntimeError: the hook did not compile"],
                         "failures.txt": ["torch.jsonl: exited 124 after 180.0 s, at its limit of 180 s: python3 x"],
                         "skipped.txt": ["cupy.jsonl: round 2 of 3: skipped, 10 s of the budget left, it needs about 16"]})
        self.assertIn("NOT RUN (stderr: RuntimeError: the hook did not compile)",
                      self.line(self.section(out, "record_stream onto the side"), "wired"))
        for start in ("PyTorch:", "CuPy:", "Allocation + free from C/C++:", "torch.empty + del", "PyTorch and CuPy on one pool",
                      "A server of 4 threads", "PyTorch's hooks", "PyTorch shim"):
            self.assertIn("NOT RUN", self.line(out, start))
        self.assertIn("exited 124", self.line(out, "torch.jsonl: exited"))
        self.assertIn("round 2 of 3", self.line(out, "cupy.jsonl"))

    def test_pytorch_without_a_modes_runs_is_missed(self):
        # gpuscope's processes gave nothing: every verdict that compares it
        # is MISSED, not met on what the other modes alone showed.
        rows = [torch_row("native", 0, 100.0), torch_row("expandable", 0, 101.0)]
        out = self.logs({"torch.jsonl": rows})
        self.assertIn("MISSED: no runs of gpuscope", self.line(out, "losses of 60 steps"))
        self.assertIn("MISSED: no runs of gpuscope", self.line(out, "step time gpuscope / native"))
        self.assertIn("MISSED: no runs of gpuscope", self.line(out, "peak reserved gpuscope"))
        out = self.logs({"torch.jsonl": [torch_row("native", 0, 100.0), torch_row("gpuscope", 0, 100.0)]})
        self.assertIn("-> met", self.line(out, "step time gpuscope / native"))
        self.assertIn("MISSED: no runs of expandable", self.line(out, "losses of 60 steps"))
        self.assertIn("MISSED: no runs of expandable", self.line(out, "peak reserved gpuscope"))

    def test_cupy_without_a_modes_runs_is_missed(self):
        rows = [cupy_row("pool", 0, 10.0), cupy_row("pool", 1, 10.5)]
        out = self.logs({"cupy.jsonl": rows})
        self.assertIn("MISSED: no runs of gpuscope", self.line(out, "results of 4 operations"))
        self.assertIn("MISSED: no runs of gpuscope", self.line(out, "time gpuscope / pool"))
        self.assertIn("MISSED: no runs of gpuscope", self.line(out, "peak reserved gpuscope"))

    def test_the_pair_from_c_without_gpuscope_or_c10_is_missed(self):
        rows = [pair_row(a, s, 40.0) for a in ("c10", "freelist") for s in (256, 1 << 20, 64 << 20)]
        rows += [pair_row("gpuscope", 256, 30.0)]
        out = self.logs({"pair.jsonl": rows})
        verdicts = [x for x in out if "gpuscope / c10" in x]
        self.assertEqual(3, len(verdicts), "\n".join(out))
        self.assertIn("0.750 (target <= 1) -> met", verdicts[0])
        for v in verdicts[1:]:
            self.assertIn("MISSED: no runs of gpuscope", v)
        out = self.logs({"pair.jsonl": [pair_row("gpuscope", s, 30.0) for s in (256, 1 << 20, 64 << 20)]})
        self.assertEqual(3, sum("MISSED: no runs of c10" in x for x in out), "\n".join(out))

    def test_the_pair_from_python_without_gpuscope_or_freelist_is_missed(self):
        out = self.logs({"pyalloc.jsonl": [pyalloc_row("native", 900.0), pyalloc_row("freelist", 1000.0)]})
        self.assertEqual(3, sum("gpuscope / freelist" in x and "MISSED: no runs of gpuscope" in x for x in out), "\n".join(out))
        out = self.logs({"pyalloc.jsonl": [pyalloc_row("native", 900.0), pyalloc_row("gpuscope", 1000.0)]})
        self.assertEqual(3, sum("gpuscope / freelist" in x and "MISSED: no runs of freelist" in x for x in out), "\n".join(out))
        out = self.logs({"pyalloc.jsonl": [pyalloc_row("freelist", 1000.0), pyalloc_row("gpuscope", 1050.0)]})
        self.assertEqual(3, sum("1.050 (target <= 1.10) -> met" in x for x in out), "\n".join(out))
        self.assertEqual(3, sum("against native" in x and "MISSED: no runs of native" in x for x in out), "\n".join(out))

    def test_one_cap_over_both_frameworks_is_met_where_each_raised_its_own_error_and_went_on(self):
        out = self.logs({"both.txt": ["summary text", both_row(), torch_past(), AFTER]})
        self.assertIn("-> met", self.line(out, "PyTorch and CuPy on one pool"))
        self.assertIn("cupy.cuda.memory.OutOfMemoryError", self.line(out, "CuPy past the cap"))
        self.assertIn("torch.OutOfMemoryError", self.line(out, "PyTorch past the cap"))
        self.assertIn("a training step ran True", self.line(out, "after:"))

    def test_one_cap_over_both_frameworks_that_did_not_bind_raise_or_go_on_is_missed(self):
        # A NULL, the tensor at address 0 the wrapper made before, is no
        # longer a refusal: the framework's own error is.
        null = "null pointer: PyTorch made a tensor of address 0"
        cases = [
            (both_row(peak_reserved=0.96e9), torch_past(), AFTER, "MISSED: the cap never bound"),
            (both_row(cupy_past_cap="null pointer", cupy_oom_is_cupys=False), torch_past(), AFTER,
             "MISSED: CuPy's allocation past the cap did not raise cupy.cuda.memory.OutOfMemoryError"),
            (both_row(cupy_message_names_the_cap=False), torch_past(), AFTER, "MISSED: CuPy's error does not carry gpuscope's message"),
            (both_row(), torch_past(torch_past_cap=null, torch_oom_is_torchs=False), AFTER,
             "MISSED: PyTorch's allocation past the cap did not raise torch.cuda.OutOfMemoryError"),
            (both_row(), torch_past(torch_message_names_the_cap=False), AFTER, "MISSED: PyTorch's error does not carry"),
            (both_row(), None, None, "MISSED: PyTorch's allocation past the cap did not raise"),
            (both_row(), torch_past(), None, "MISSED: the process did not go on"),
            (both_row(), torch_past(), dict(AFTER, step_after=False, went_on=False), "MISSED: the process did not go on"),
            (both_row(both_named=False), torch_past(), AFTER, "MISSED: the Summary does not name both scopes"),
            (both_row(under_cap=False, peak_reserved=2.2e9), torch_past(), AFTER, "MISSED: reserved passed the cap"),
        ]
        for row, torch, after, want in cases:
            out = self.logs({"both.txt": [row] + [x for x in (torch, after) if x]})
            self.assertIn(want, self.line(out, "PyTorch and CuPy on one pool"), row)

    def test_the_server_is_met_where_each_request_held_its_own_bytes_and_ended_clean(self):
        out = self.logs({"server.jsonl": [server_row()]})
        self.assertIn("24 requests (12 training steps, 12 inferences, interleaved)", self.line(out, "A server of 4 threads"))
        self.assertIn("-> met", self.line(out, "A server of 4 threads"))
        mismatch = {"thread": 2, "round": 3, "kind": "train", "live": 9000, "expected": 8192}
        cases = [
            (server_row(backend="host"), "the host backend, not PyTorch"),
            (server_row(each_in_its_own_scope=False, mismatched=[mismatch]), "1 requests' scopes did not hold exactly their bytes"),
            (server_row(summaries_name_the_four=False), "a Summary did not name the four"),
            (server_row(ended_cleanly=False, allocated_after=6e8), "memory was left"),
            (server_row(c_failures=2), "2 calls failed"),
            (server_row(errors=["thread 1: OutOfMemoryError: ..."]), "requests failed: thread 1"),
            (server_row(kinds={"train": 24, "infer": 0}), "training steps and inferences did not both run"),
        ]
        for row, want in cases:
            out = self.logs({"server.jsonl": [row]})
            self.assertIn("MISSED: " + want if "host" in want else want, self.line(out, "A server of 4 threads"), row)
            self.assertNotIn("-> met", self.line(out, "A server of 4 threads"))
        out = self.logs({"server.jsonl": [server_row(each_in_its_own_scope=False, mismatched=[mismatch])]})
        self.assertIn("its scope held 9000 bytes, it held 8192", self.line(out, "request 2-3 (train)"))

    def test_the_hooks_are_met_where_each_acted(self):
        out = self.logs({"hooks.jsonl": [hooks_row()]})
        for start in ("torch.cuda.empty_cache()", "set_per_process_memory_fraction", "CUDA graph capture"):
            self.assertIn("-> met", self.line(out, start))
        out = self.logs({"hooks.jsonl": [hooks_row(empty_cache={"acted": False}, memory_fraction={"acted": False},
                                                   graph_capture={"refused": False, "message": "captured"})]})
        for start in ("torch.cuda.empty_cache()", "set_per_process_memory_fraction", "CUDA graph capture"):
            self.assertIn("MISSED", self.line(out, start))

    def test_the_shim_is_met_where_it_built(self):
        out = self.logs({"shim.txt": ["/tmp/x/torch_shim.so"]})
        self.assertIn("-> met", self.line(out, "PyTorch shim"))
        out = self.logs({"shim.txt.err": ["gpuscope.GpuscopeError: compiling torch_shim.cpp failed"]})
        self.assertIn("not built -> MISSED (stderr: gpuscope.GpuscopeError: compiling", self.line(out, "PyTorch shim"))

    def test_the_pair_caches_hit_rate_is_printed_for_each_process(self):
        stats = {"c_pair_hits": 3000, "c_pair_allocs": 4000, "allocs": 1200}
        older = {"c_pair_hits": 1000, "allocs": 3000}  # a library without c_pair_allocs
        rows = [torch_row("native", 0, 100.0), dict(torch_row("gpuscope", 0, 100.0), gpuscope_stats=stats),
                dict(torch_row("gpuscope", 1, 100.0), gpuscope_stats={"c_pair_hits": 0, "allocs": 50}),
                dict(torch_row("gpuscope", 2, 100.0), gpuscope_stats=older)]
        out = self.logs({"torch.jsonl": rows})
        self.assertIn("pair cache served 75.0%, 0.0%, 25.0% of the allocations", self.line(out, "gpuscope   pair cache"))

    def test_gpuscopes_stats_are_printed_where_the_runs_have_them(self):
        stats = {"c_pair_hits": 1399993, "c_failures": 0, "allocs": 7, "frees": 6, "served_from_cache": 5, "ooms": 0}
        rows = [torch_row("native", 0, 100.0), torch_row("expandable", 0, 100.0), dict(torch_row("gpuscope", 0, 100.0), gpuscope_stats=stats)]
        out = self.logs({"torch.jsonl": rows})
        self.assertIn("pair hits 1399993 of None (late None), allocs 7, frees 6, served from cache 5, c_failures 0, ooms 0",
                      self.line(out, "gpuscope   stats"))

        pairs = [pair_row(a, s, 40.0) for a in ("c10", "freelist") for s in (256, 1 << 20, 64 << 20)]
        pairs += [dict(pair_row("gpuscope", s, 30.0), pair_hits=6999993, allocs=7, c_failures=0) for s in (256, 1 << 20, 64 << 20)]
        pairs += [dict(pair_row("gpuscope-go", s, 300.0), pair_hits=0, allocs=7000007, c_failures=0) for s in (256, 1 << 20, 64 << 20)]
        out = self.logs({"pair.jsonl": pairs})
        self.assertEqual(3, sum("gpuscope: pair hits 6999993, allocs through Go 7, c_failures 0" in x for x in out), "\n".join(out))
        self.assertEqual(3, sum("gpuscope-go: pair hits 0, allocs through Go 7000007" in x for x in out), "\n".join(out))

        g = pyalloc_row("gpuscope", 1000.0)
        for sz in (256, 1 << 20, 64 << 20):
            g[str(sz)].update(pair_hits=299, allocs=1, c_failures=0)
        g["gpuscope_stats"] = stats
        out = self.logs({"pyalloc.jsonl": [pyalloc_row("native", 900.0), pyalloc_row("freelist", 1000.0), g]})
        self.assertEqual(3, sum("gpuscope, each process: pair hits 299, allocs through Go 1, c_failures 0" in x for x in out), "\n".join(out))

    def test_compute_sanitizer_is_met_only_where_it_found_no_error(self):
        run = '{"mode": "gpuscope", "steps": 4}'
        out = self.logs({"sanitizer.txt": ["========= COMPUTE-SANITIZER", run, "========= ERROR SUMMARY: 0 errors"]})
        self.assertIn("0 errors -> met", self.line(out, "compute-sanitizer"))
        out = self.logs({"sanitizer.txt": ["========= COMPUTE-SANITIZER", run, "========= ERROR SUMMARY: 3 errors"]})
        self.assertIn("3 errors -> MISSED", self.line(out, "compute-sanitizer"))
        out = self.logs({"sanitizer.txt": ["========= COMPUTE-SANITIZER", "========= ERROR SUMMARY: 0 errors"]})
        self.assertIn("MISSED: the PyTorch run gave no result", self.line(out, "compute-sanitizer"))
        out = self.logs({})
        self.assertIn("MISSED (NOT RUN)", self.line(out, "compute-sanitizer"))

    def test_cublas_is_met_where_its_test_passed(self):
        out = self.logs({"cublas_test.txt": ["=== RUN   TestCublas", "--- PASS: TestCublas (0.66s)", "PASS"]})
        self.assertIn("-> met", self.line(out, "cuBLAS"))
        out = self.logs({"cublas_test.txt": ["=== RUN   TestCublas", "--- FAIL: TestCublas (0.66s)", "FAIL"]})
        self.assertIn("-> MISSED", self.line(out, "cuBLAS"))
        out = self.logs({"cublas_test.txt": ["=== RUN   TestCublas", "--- SKIP: TestCublas (0.00s)", "PASS"]})
        self.assertIn("-> MISSED", self.line(out, "cuBLAS"))
        self.assertIn("MISSED (NOT RUN)", self.line(self.logs({}), "cuBLAS"))

    def test_the_verdict_passes_only_where_every_target_is_met(self):
        ok = ["a -> met", "  b -> met (refused, with why)", "  unwired (the control): ... -> the check can fail, as it should"]
        self.assertEqual("VERDICT: PASS: 2 targets met", interop_report.overall(ok))
        self.assertEqual("VERDICT: FAIL: 1 MISSED (2 met)", interop_report.overall(ok + ["c -> MISSED: x"]))
        self.assertEqual("VERDICT: FAIL: 1 INCONCLUSIVE (2 met)", interop_report.overall(ok + ["  -> INCONCLUSIVE: y"]))
        self.assertIn("parts failed", interop_report.overall(ok + ["", "Parts that failed:", "  x"]))
        self.assertIn("parts left out by the budget", interop_report.overall(ok + ["", "Parts the budget left out:", "  y"]))
        self.assertEqual("VERDICT: FAIL: nothing met (0 met)", interop_report.overall([]))
        # A run with nothing: every target not run is MISSED.
        self.assertRegex(interop_report.overall(self.logs({})), r"^VERDICT: FAIL: \d+ MISSED \(0 met\)$")

    def test_a_run_of_some_parts_is_read_for_those_alone(self):
        # PARTS="hooks both cupy": the parts left out are no target of the
        # run's, whose verdict is of those it ran.
        files = {"shim.txt": ["/build/torch_shim-0123.so"], "hooks.jsonl": [hooks_row()],
                 "both.txt": [both_row(), torch_past(), AFTER],
                 "cupy.jsonl": [cupy_row("pool", 0, 10.0), cupy_row("gpuscope", 0, 10.1)],
                 "cupy_pair.jsonl": [cupy_pair_row({"pool": 1800.0, "freelist": 2000.0, "gpuscope": 2150.0})]}
        out = self.logs(dict(files, **{"parts.txt": ["hooks both cupy"]}))
        self.assertRegex(interop_report.overall(out), r"^VERDICT: PASS: \d+ targets met$", "\n".join(out))
        self.assertEqual("Parts not asked for (PARTS=hooks both cupy), not read: streams server torch pair pyalloc cublas "
                         "sanitizer", out[-1])
        self.assertFalse(any("NOT RUN" in x for x in out), "\n".join(out))
        self.assertRegex(interop_report.overall(self.logs(files)), r"^VERDICT: FAIL: \d+ MISSED")  # every part asked
        del files["hooks.jsonl"]
        out = self.logs(dict(files, **{"parts.txt": ["hooks both cupy"]}))
        self.assertIn("PyTorch's hooks through the shim: no result -> MISSED (NOT RUN)", out)
        self.assertRegex(interop_report.overall(out), r"^VERDICT: FAIL: 1 MISSED")
        out = self.logs(dict(files, **{"parts.txt": [" ".join(interop_report.ALL_PARTS)]}))
        self.assertFalse(any(x.startswith("Parts not asked for") for x in out), "\n".join(out))

    def test_cupy_time_is_of_the_medians(self):
        rows = [{"mode": m, "round": r, "ops": 4, "passes": 1, "pass_ms": [t], "pass_ms_min": t,
                 "peak_reserved": {"pool": 2e9, "gpuscope": 1e9}[m], "digest": "d"}
                for m, r, t in (("pool", 0, 10.0), ("gpuscope", 0, 10.1), ("gpuscope", 1, 9.0), ("pool", 1, 11.0))]
        out = self.logs({"cupy.jsonl": rows})
        self.assertIn("0.9095 (target <= 1.02) -> met", self.line(out, "time gpuscope / pool, medians"))
        self.assertIn("10.00, 11.00; spread 9.5%", self.line(out, "pool       pass"))


    def test_cupys_pair_is_read_against_the_free_list(self):
        # Issue 47: within 1.10 times the free list's, whatever the pool's.
        rows = [cupy_pair_row({"pool": 1800.0, "freelist": 2000.0, "gpuscope": 2150.0}),
                cupy_pair_row({"pool": 1900.0, "freelist": 2100.0, "gpuscope": 2300.0})]
        out = self.section(self.logs({"cupy_pair.jsonl": rows}), "cupy.empty + del from Python")
        rows_256 = out[out.index(next(x for x in out if x.strip().startswith("256 B"))):]
        self.assertIn("pool 1850   freelist 2050   gpuscope 2225", rows_256[0])
        self.assertIn("1.085 (target <= 1.10) -> met", rows_256[1])
        self.assertIn("freelist 1.108, gpuscope 1.203", rows_256[2])
        self.assertIn("pair hits 300 of 300, allocs through Go 0", rows_256[3])
        rows = [cupy_pair_row({"pool": 1800.0, "freelist": 2000.0, "gpuscope": 2300.0})]
        out = self.logs({"cupy_pair.jsonl": rows})
        self.assertEqual(3, sum("1.150 (target <= 1.10) -> MISSED" in x for x in out), "\n".join(out))
        self.assertIn("-> MISSED (NOT RUN)", self.line(self.logs({}), "cupy.empty + del from Python"))

    def test_cupys_pair_is_judged_within_rounds_where_the_rounds_are_kept(self):
        # The machine drifts between rounds: each round's gpuscope against
        # the same round's free list, then their median. Here the medians'
        # ratio (2200 / 2000) is 1.100 and the rounds' 1.05, 1.05 and 1.20.
        rows = [cupy_pair_row({"pool": 1800.0, "freelist": 2000.0, "gpuscope": 2200.0})]
        for s in ("256", "1048576", "67108864"):
            rows[0][s]["freelist"]["rounds_ns"] = [2000.0, 2200.0, 1800.0]
            rows[0][s]["gpuscope"]["rounds_ns"] = [2100.0, 2310.0, 2160.0]
        out = self.logs({"cupy_pair.jsonl": rows})
        self.assertEqual(3, sum("within a round 1.050 (median of 3 rounds' ratios; target <= 1.10) -> met; "
                                "of the medians 1.100" in x for x in out), "\n".join(out))
        for s in ("256", "1048576", "67108864"):
            rows[0][s]["gpuscope"]["rounds_ns"] = [2400.0, 2420.0, 1800.0]
        out = self.logs({"cupy_pair.jsonl": rows})
        self.assertEqual(3, sum("within a round 1.100" in x and "-> met" in x for x in out), "\n".join(out))
        for s in ("256", "1048576", "67108864"):
            rows[0][s]["gpuscope"]["rounds_ns"] = [2400.0, 2440.0, 1800.0]
        out = self.logs({"cupy_pair.jsonl": rows})
        self.assertEqual(3, sum("within a round 1.109" in x and "-> MISSED" in x for x in out), "\n".join(out))

    def test_cupys_pair_shows_what_use_cupys_function_costs(self):
        rows = [cupy_pair_row({"pool": 1800.0, "freelist": 2000.0, "gpuscope": 2150.0, "gpuscope-unchecked": 2110.0})]
        rows[0]["callable"] = "C, the stream from CuPy's C function"
        out = self.logs({"cupy_pair.jsonl": rows})
        self.assertEqual(3, sum("the current stream's allocator, the check of the pointer for CuPy's OutOfMemoryError) "
                                "costs 40 ns a pair; unchecked / freelist 1.055" in x
                                for x in out), "\n".join(out))
        self.assertIn("use_cupy's function ran in C, the stream from CuPy's C function",
                      self.line(out, "use_cupy's function ran in"))


if __name__ == "__main__":
    unittest.main()
