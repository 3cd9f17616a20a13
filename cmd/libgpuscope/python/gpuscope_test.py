"""Tests of gpuscope.py over the host-memory library (GPUSCOPE_LIB): the
ctypes layer, scopes, stats, the cap, and what use_torch and use_cupy hand
to PyTorch and CuPy (stand-in modules record it; the real frameworks are
exercised on a GPU by scripts/measure/interop-gpu.sh). python_test.go runs
this file after building the library."""
import ctypes
import gc
import itertools
import os
import re
import sys
import tempfile
import threading
import types
import unittest
from unittest import mock

import gpuscope

MiB = 1 << 20


def lib():
    return gpuscope.load()


def alloc(size):
    return lib().gpuscope_alloc(size, 0, None)


def free(ptr, size):
    lib().gpuscope_free(ptr, size, 0, None)


def row(name):
    """The Summary's row of the scope named name, or None."""
    m = re.search(rf"(?m)^ +{re.escape(name)} +(.*)$", gpuscope.summary())
    return m.group(1) if m else None


class Scopes(unittest.TestCase):
    def test_what_is_allocated_in_a_scope_is_its_own_in_the_summary(self):
        with gpuscope.scope("outer"):
            p = alloc(MiB)
            with gpuscope.scope("inner"):
                q = alloc(3 * MiB)
                self.assertEqual(gpuscope.stats()["scope"], "libgpuscope/outer/inner")
                self.assertIn("1 buffer (3.00 MiB)", row("inner"))
                self.assertIn("1 buffer (1.00 MiB)", row("outer"))
                self.assertRegex(row("outer"), r"^4\.00 MiB")  # with its child's
                free(q, 3 * MiB)
            free(p, MiB)
        self.assertIsNone(row("outer"))
        self.assertEqual(gpuscope.stats()["allocated"], 0)

    def test_what_a_scope_leaves_live_passes_on_or_is_freed(self):
        before = gpuscope.stats()["allocated"]
        with gpuscope.scope("kept"):
            p = alloc(MiB)
        self.assertIn("kept", gpuscope.stats()["last_scope_end"])
        self.assertEqual(gpuscope.stats()["allocated"], before + MiB, "memory a library may use is not freed under it")
        free(p, MiB)
        with gpuscope.scope("freed", free_live=True):
            alloc(MiB)
        self.assertEqual(gpuscope.stats()["allocated"], before)

    def test_another_thread_allocates_in_its_own_scope_or_the_root(self):
        # Issue 43: the scope was the process's, and another thread's
        # memory was charged to it.
        with gpuscope.scope("mine"):
            got = []
            t = threading.Thread(target=lambda: got.append((alloc(2 * MiB), gpuscope.stats()["scope"])))
            t.start()
            t.join()
            self.assertRegex(row("mine"), r"^0 B ", "another thread's allocation was charged to this thread's scope")
            self.assertEqual(got[0][1], "libgpuscope", "a thread with no scope is in the root")
            self.assertIn("1 buffer (2.00 MiB)", row("libgpuscope"))
            self.assertEqual(gpuscope.stats()["scope"], "libgpuscope/mine")
            free(got[0][0], 2 * MiB)

    def test_scopes_of_two_threads_are_siblings_that_end_apart(self):
        # req1 begins, req2 begins in another thread, req1 ends first: each
        # holds its own bytes, and neither end waits for the other's.
        step = [threading.Event() for _ in range(4)]
        seen = {}

        def req2():
            step[0].wait()
            with gpuscope.scope("req2"):
                p = alloc(3 * MiB)
                seen["req2"] = gpuscope.stats()["scope"]
                step[1].set()
                step[2].wait()
                seen["rows"] = (row("req1"), row("req2"))
                free(p, 3 * MiB)
            step[3].set()

        t = threading.Thread(target=req2)
        t.start()
        with gpuscope.scope("req1"):
            p = alloc(MiB)
            step[0].set()
            step[1].wait()
            self.assertIn("1 buffer (1.00 MiB)", row("req1"))
            self.assertIn("1 buffer (3.00 MiB)", row("req2"))
            free(p, MiB)
        self.assertIsNone(row("req1"), "req1 did not end while req2 was open")
        step[2].set()
        step[3].wait()
        t.join()
        self.assertEqual(seen["req2"], "libgpuscope/req2", "req2 opened inside req1")
        self.assertIsNone(seen["rows"][0])
        self.assertIn("1 buffer (3.00 MiB)", seen["rows"][1])
        self.assertEqual(gpuscope.stats()["scope"], "libgpuscope")

    def test_a_scope_bound_to_a_stream_takes_a_scopeless_threads_allocations_on_it(self):
        side = 0x7000  # a stream handle of a library's
        with gpuscope.scope("train", stream=side):
            got = []

            def autograd():  # a thread of the framework's, with no scope
                got.append(lib().gpuscope_alloc(MiB, 0, side))
                got.append(alloc(2 * MiB))  # the default stream: not bound

            t = threading.Thread(target=autograd)
            t.start()
            t.join()
            self.assertRegex(row("train"), r"^1\.00 MiB", "the bound stream's allocation is not in the scope")
            self.assertIn("1 buffer (2.00 MiB)", row("libgpuscope"))
            lib().gpuscope_free(got[0], MiB, 0, side)
            free(got[1], 2 * MiB)

    def test_a_scope_inside_a_bound_one_binds_its_stream_until_it_ends(self):
        # Scopes nest, as PyTorch's use_mem_pool and CuPy's using_allocator
        # do: a step's scope inside a training scope, each bound to the
        # stream autograd works on. The inner bind was refused, so that no
        # code could open a bound scope inside another.
        side = 0x7300
        got = []

        def autograd():  # a thread of the framework's, with no scope
            got.append(lib().gpuscope_alloc(MiB, 0, side))

        def on_its_thread(fn):
            t = threading.Thread(target=fn)
            t.start()
            t.join()

        with gpuscope.scope("train", stream=side):
            with gpuscope.scope("step", stream=side):
                on_its_thread(autograd)
                self.assertRegex(row("step"), r"^1\.00 MiB", "the innermost bound scope takes the stream")
                lib().gpuscope_free(got.pop(), MiB, 0, side)
            on_its_thread(autograd)
            self.assertRegex(row("train"), r"^1\.00 MiB", "the stream is the outer scope's again")
            lib().gpuscope_free(got.pop(), MiB, 0, side)

            def sibling():  # another thread's scope is no scope inside train
                try:
                    with gpuscope.scope("other", stream=side):
                        pass
                except gpuscope.GpuscopeError as e:
                    got.append(str(e))

            on_its_thread(sibling)
            self.assertRegex(got.pop(), "is bound to scope .*, which is open")

    def test_an_error_at_the_end_never_replaces_the_blocks_exception(self):
        inner = gpuscope.scope("inner")
        with self.assertRaises(KeyError) as caught:
            with gpuscope.scope("outer") as outer:
                inner.__enter__()  # still open when outer ends: outer cannot end
                raise KeyError("the caller's")
        self.assertEqual(caught.exception.args, ("the caller's",))
        notes = getattr(caught.exception, "__notes__", [])
        self.assertTrue(any("'outer'" in n and "failed to end" in n for n in notes), notes)
        inner.__exit__(None, None, None)
        self.assertEqual(lib().gpuscope_scope_end(outer, 0), 0)

    def test_an_error_at_the_end_without_an_exception_raises(self):
        inner = gpuscope.scope("inner")
        with self.assertRaisesRegex(gpuscope.GpuscopeError, r"'outer' on device 0 did not end: .*open inside it"):
            with gpuscope.scope("outer") as outer:
                inner.__enter__()
        inner.__exit__(None, None, None)
        self.assertEqual(lib().gpuscope_scope_end(outer, 0), 0)

    def test_a_scope_on_a_device_that_does_not_exist_fails_clearly(self):
        with self.assertRaisesRegex(gpuscope.GpuscopeError, r"^gpuscope: scope\('x', device=7\): gpu: no device: device 7: built without -tags cuda"):
            with gpuscope.scope("x", device=7):
                pass

    def test_scope_none_is_an_unnamed_scope_as_cs_null(self):
        with gpuscope.scope(None):
            self.assertRegex(gpuscope.stats()["scope"], r"^libgpuscope/[^/]+#\d+$")

    def test_a_scopes_name_and_device_are_checked(self):
        for name, err in ((3, TypeError), (b"x", TypeError), ("", ValueError), ("a/b", ValueError), ("a\0b", ValueError)):
            with self.assertRaises(err, msg=repr(name)):
                with gpuscope.scope(name):
                    pass
        with self.assertRaisesRegex(ValueError, "device -1: no such device"):
            with gpuscope.scope("x", device=-1):
                pass
        with self.assertRaises(TypeError):
            with gpuscope.scope("x", device="cuda:0"):
                pass

    def test_a_summary_longer_than_the_first_buffer_comes_whole(self):
        names = [f"scope-with-a-long-name-{i:03d}" for i in range(80)]
        opened = []
        try:
            for n in names:
                cm = gpuscope.scope(n)
                cm.__enter__()
                opened.append(cm)
            text = gpuscope.summary()
            self.assertGreater(len(text), 4096)
            self.assertIn(names[-1], text)
        finally:
            for cm in reversed(opened):
                cm.__exit__(None, None, None)


class Sleep(unittest.TestCase):
    def end(self, sid):
        self.assertEqual(lib().gpuscope_scope_end(sid, gpuscope.FREE_LIVE), 0)

    def test_a_sleeping_scope_wakes_at_its_addresses_with_its_contents_or_zeros(self):
        with gpuscope.scope("weights", sleepable=True) as sid:
            p = alloc(8 * MiB)
            ctypes.memset(p, 0x5A, 8 * MiB)  # the host device's memory is this process's
        self.addCleanup(self.end, sid)
        self.assertIsNotNone(row("weights"), "its end with memory live leaves it open")
        self.assertEqual(gpuscope.stats()["scope"], "libgpuscope", "no longer the thread's")
        gpuscope.sleep("weights", keep=True)
        st = gpuscope.stats()
        self.assertEqual(st["sleeping"], 8 * MiB)
        self.assertEqual(st["sleeping_scopes"], 1)
        self.assertIn("sleepable, asleep", row("weights"))
        gpuscope.wake("weights")
        self.assertEqual(ctypes.string_at(p, 4096), b"\x5a" * 4096, "the same bytes at the same address")
        gpuscope.sleep("weights", keep=False)
        gpuscope.wake("weights")
        self.assertEqual(ctypes.string_at(p, 4096), bytes(4096), "zeros where the contents were dropped")
        gpuscope.wake("weights")  # awake: nothing to do

    def test_memory_a_scope_gave_back_serves_another_until_it_wakes(self):
        gpuscope.empty_cache()
        with gpuscope.scope("big", sleepable=True) as sid:
            p = alloc(96 * MiB)
            ctypes.memset(p, 7, 96 * MiB)
        self.addCleanup(self.end, sid)
        gpuscope.sleep("big")
        with gpuscope.scope("other", free_live=True):
            q = alloc(200 * MiB)
            self.assertTrue(q, "200 MiB beside 96 MiB asleep, on a device of 256 MiB")
            with self.assertRaisesRegex(gpuscope.GpuscopeError, "out of memory"):
                gpuscope.wake("big")
            self.assertEqual(gpuscope.stats()["sleeping_scopes"], 1, "a wake that fails leaves it asleep")
            free(q, 200 * MiB)
        gpuscope.wake("big")
        self.assertEqual(ctypes.string_at(p + 95 * MiB, 16), bytes([7]) * 16)

    def test_sleep_waits_for_the_frameworks_on_its_own_device(self):
        synced = []
        saved = _modules(("torch", "cupy"))
        self.addCleanup(_restore, saved)
        sys.modules["torch"] = types.SimpleNamespace(cuda=types.SimpleNamespace(
            is_initialized=lambda: True, synchronize=lambda device=None: synced.append(("torch", device))))
        device = types.SimpleNamespace(synchronize=lambda: synced.append(("cupy", "its device")))
        sys.modules["cupy"] = types.SimpleNamespace(cuda=types.SimpleNamespace(
            Device=lambda i: device if i == 0 else None,
            runtime=types.SimpleNamespace(deviceSynchronize=lambda: synced.append(("cupy", "the current one")))))
        with gpuscope.scope("synced", sleepable=True) as sid:
            alloc(MiB)
        self.addCleanup(self.end, sid)
        gpuscope.sleep("synced", device=0)
        gpuscope.wake("synced", device=0)
        self.assertEqual(synced, [("torch", 0), ("cupy", "its device")], "the scope's device, not the current one")

    def test_a_tensor_freed_asleep_is_freed_and_end_ends_the_scope_left_open(self):
        with gpuscope.scope("kv", sleepable=True) as sid:
            p, q = alloc(8 * MiB), alloc(8 * MiB)
            c = lib().gpuscope_cupy_malloc(0, MiB, 0)
            with self.assertRaisesRegex(gpuscope.GpuscopeError, r"end\('kv'\): its with block is running"):
                gpuscope.end("kv")
        self.assertIsNotNone(row("kv"), "left open, holding memory")
        gpuscope.sleep("kv", keep=False)
        failures = gpuscope.stats()["c_failures"]
        free(p, 8 * MiB)  # the garbage collector drops a tensor
        lib().gpuscope_cupy_free(0, c, 0)
        st = gpuscope.stats()
        self.assertEqual(st["c_failures"], failures, st["c_last_error"])
        self.assertEqual(st["sleeping"], 8 * MiB, "the frees asleep are in the figures")
        self.assertEqual(gpuscope.scope_stats(sid)["live"], 8 * MiB)
        with self.assertRaisesRegex(gpuscope.GpuscopeError, r"end\('kv'\): PyTorch or CuPy still hold 8388608 bytes"):
            gpuscope.end("kv")
        self.assertEqual(gpuscope.stats()["sleeping_scopes"], 1, "it stays open, asleep")
        free(q, 8 * MiB)
        gpuscope.end("kv")
        st = gpuscope.stats()
        self.assertEqual((st["sleeping"], st["sleeping_scopes"]), (0, 0))
        self.assertIsNone(row("kv"), "it ended")
        with self.assertRaisesRegex(gpuscope.GpuscopeError, "no sleepable scope named 'kv'"):
            gpuscope.end("kv")

    def test_end_with_free_live_frees_what_is_still_held(self):
        with gpuscope.scope("weights", sleepable=True):
            p = alloc(4 * MiB)
        gpuscope.end("weights", free_live=True)
        self.assertIsNone(row("weights"))
        failures = gpuscope.stats()["c_failures"]
        free(p, 4 * MiB)
        self.assertEqual(gpuscope.stats()["c_failures"], failures + 1, "its memory was freed at the end")
        with gpuscope.scope("empty", sleepable=True):
            pass
        with self.assertRaisesRegex(gpuscope.GpuscopeError, r"end\('empty'\): .*no such scope open"):
            gpuscope.end("empty")  # it held nothing: its block ended it
        with gpuscope.scope("plain"):
            with self.assertRaisesRegex(gpuscope.GpuscopeError, "no sleepable scope named 'plain'"):
                gpuscope.end("plain")

    def test_names_are_checked(self):
        with self.assertRaisesRegex(ValueError, "a sleepable scope has a name"):
            with gpuscope.scope(None, sleepable=True):
                pass
        with self.assertRaisesRegex(gpuscope.GpuscopeError, "no sleepable scope named 'nothing'"):
            gpuscope.sleep("nothing")
        with gpuscope.scope("plain"):
            with self.assertRaisesRegex(gpuscope.GpuscopeError, "no sleepable scope named 'plain'"):
                gpuscope.wake("plain")
        with gpuscope.scope("empty", sleepable=True):
            pass
        with self.assertRaisesRegex(gpuscope.GpuscopeError, r"sleep\('empty', keep=True\): .*no such scope open"):
            gpuscope.sleep("empty")  # it held nothing: it ended


class Cap(unittest.TestCase):
    def tearDown(self):
        gpuscope.set_max_reserved(0)

    def test_an_allocation_past_the_cap_is_null_and_counted(self):
        failures = gpuscope.stats()["c_failures"]
        gpuscope.empty_cache()
        gpuscope.set_max_reserved(gpuscope.stats()["reserved"] + 2 * MiB)
        self.assertIsNone(alloc(64 * MiB))
        msg, out_of_memory = gpuscope._last_error()
        self.assertTrue(out_of_memory, msg)
        self.assertIn("cap", msg)
        st = gpuscope.stats()
        self.assertEqual(st["c_failures"], failures + 1)
        self.assertIn("cap", st["c_last_error"])
        gpuscope.set_max_reserved(0)
        p = alloc(64 * MiB)
        self.assertIsNotNone(p)
        free(p, 64 * MiB)

    def test_a_cap_on_a_device_that_does_not_exist_raises(self):
        with self.assertRaisesRegex(gpuscope.GpuscopeError, r"set_max_reserved\(4194304, device=7\): gpu: no device: device 7"):
            gpuscope.set_max_reserved(4 * MiB, device=7)

    def test_a_cap_that_can_never_work_is_a_value_error_with_the_librarys_message(self):
        gpuscope.set_max_reserved(64 * MiB)
        for cap in (2**64 + 4096, 2**63, -1):  # ctypes would wrap them: 4 KiB, 2**63, SIZE_MAX
            with self.assertRaisesRegex(ValueError, r"a cap is from 0 \(none\) to 2\*\*63-1 bytes", msg=cap):
                gpuscope.set_max_reserved(cap)
        with self.assertRaisesRegex(ValueError, r"^gpuscope: set_max_reserved\(1000, device=0\): gpu: invalid size: a cap of 1000 bytes "
                                    r"is below one page of 2.00 MiB.*give at least 2097152 bytes, or 0 to remove the cap$"):
            gpuscope.set_max_reserved(1000)
        for cap in ("1GiB", 1.5, True):
            with self.assertRaises(TypeError, msg=repr(cap)):
                gpuscope.set_max_reserved(cap)

    def test_an_integer_of_another_type_is_an_int(self):
        # NumPy's integers, and any object that says it stands for an int
        # (__index__), are ints to ctypes: they were before the checks.
        class Index:
            def __init__(self, n):
                self.n = n

            def __index__(self):
                return self.n

        gpuscope.empty_cache(Index(0))
        gpuscope.set_max_reserved(Index(gpuscope.stats(device=Index(0))["reserved"] + 2 * MiB), device=Index(0))
        with gpuscope.scope("indexed", device=Index(0)):
            self.assertIsNone(alloc(64 * MiB), "the cap holds")
        with self.assertRaisesRegex(ValueError, r"a cap is from 0"):
            gpuscope.set_max_reserved(Index(-1))

    def test_a_fraction_that_can_never_work_names_cs_call_alone(self):
        # C called gpuscope_set_memory_fraction: the message named Go's
        # SetMaxReservedFraction after the C call's name.
        for fraction, said in ((1.5, "1.5"), (0.0, "0"), (-0.25, "-0.25"), (float("nan"), "NaN")):
            self.assertEqual(lib().gpuscope_set_memory_fraction(0, fraction), -1, fraction)
            msg, kind = gpuscope._last_failure()
            self.assertEqual(msg, "gpuscope_set_memory_fraction: gpu: invalid size: a fraction of the device must be in "
                                  f"(0, 1], not {said}")
            self.assertEqual(kind, gpuscope.INVALID_SIZE)

    def test_an_allocation_past_the_cap_advises_pythons_call(self):
        gpuscope.set_max_reserved(2 * MiB)
        self.assertIsNone(alloc(4 * MiB))
        msg, out_of_memory = gpuscope._last_error()
        self.assertTrue(out_of_memory, msg)
        self.assertIn("raise it with gpuscope.set_max_reserved;", msg)
        self.assertNotIn("Device.SetMaxReserved", msg)


class Failures(unittest.TestCase):
    def written(self, code):
        """What a process that imports gpuscope and runs code writes to
        standard error."""
        import subprocess

        r = subprocess.run([sys.executable, "-c", "import ctypes, gpuscope\n" + code], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.abspath(gpuscope.__file__))))
        return r.stderr

    def test_a_failure_raised_is_not_written_too(self):
        # PyTorch's allocator raises its errors and prints nothing; the
        # library wrote each failure this module raises to standard error.
        err = self.written("try:\n    gpuscope.set_max_reserved(1000)\nexcept ValueError as e:\n    print('raised', e)")
        self.assertEqual(err, "")
        # A free tells its caller nothing: its failure is written.
        err = self.written("gpuscope.load().gpuscope_free(ctypes.c_void_p(0x1000), 64, 0, None)")
        self.assertRegex(err, r"^gpuscope: gpuscope_free: .*0x1000")
        # Where PyTorch runs over its wrapper alone, whose allocations
        # raise nothing, the library writes the failures again.
        err = self.written("gpuscope.load().gpuscope_print_failures(1)\n"
                           "gpuscope.load().gpuscope_set_max_reserved(0, 1000)")
        self.assertRegex(err, r"^gpuscope: gpuscope_set_max_reserved: .*below one page")


class Stats(unittest.TestCase):
    def test_a_device_that_does_not_exist_raises_never_returns_an_error(self):
        for call in (gpuscope.stats, gpuscope.summary):
            with self.assertRaisesRegex(gpuscope.GpuscopeError, r"device=5\): .*device 5", msg=call.__name__):
                call(device=5)
        with self.assertRaises(TypeError):
            gpuscope.stats(device=None)


class Fork(unittest.TestCase):
    def test_a_child_forked_while_the_modules_lock_is_held_fails_clearly(self):
        # The child of a fork has the lock as the parent held it, by a
        # thread the child does not have: every call of the module (each
        # takes it in load()) waited forever, where the library fails at
        # once in a fork's child.
        lib()
        held, done = threading.Event(), threading.Event()

        def holder():  # a thread of the parent's, in the module's lock at the fork
            with gpuscope._lock:
                held.set()
                done.wait()

        t = threading.Thread(target=holder)
        t.start()
        held.wait()
        pid = os.fork()
        if pid == 0:  # the child: SIGALRM ends it where a call hangs
            import signal
            signal.alarm(5)
            try:
                gpuscope.stats()
                os._exit(1)
            except gpuscope.GpuscopeError as e:
                os._exit(0 if "child of a fork" in str(e) else 2)
            except BaseException:  # noqa: BLE001 - the child reports by its status alone
                os._exit(3)
        done.set()
        t.join()
        _, status = os.waitpid(pid, 0)
        self.assertTrue(os.WIFEXITED(status), f"the child hung on the module's lock (status {status:#x})")
        self.assertEqual(os.WEXITSTATUS(status), 0)


class Loading(unittest.TestCase):
    def test_a_second_library_beside_the_first_is_refused(self):
        with self.assertRaisesRegex(gpuscope.GpuscopeError, "already loaded"):
            gpuscope.load("/nonexistent/libgpuscope.so")

    def test_the_same_path_loads_the_same_library(self):
        self.assertIs(gpuscope.load(os.environ["GPUSCOPE_LIB"]), lib())


def _modules(names):
    """The modules of those names, to _restore after a test replaced them."""
    return {k: sys.modules.get(k) for k in names}


def _restore(saved):
    for k, v in saved.items():
        if v is None:
            sys.modules.pop(k, None)
        else:
            sys.modules[k] = v


class Frameworks(unittest.TestCase):
    def setUp(self):
        self.saved = _modules(("torch", "torch.utils", "cupy"))

    def tearDown(self):
        _restore(self.saved)

    def test_use_torch_without_its_shim_says_so_and_why(self):
        # No PyTorch headers here: the shim cannot be built, and use_torch
        # warns, with why, and hands PyTorch this library's two functions.
        seen = {}
        memory = types.SimpleNamespace(
            CUDAPluggableAllocator=lambda path, a, f: ("allocator", path, a, f),
            change_current_allocator=lambda x: seen.setdefault("current", x),
        )
        sys.modules["torch"] = types.SimpleNamespace(
            __version__="none", cuda=types.SimpleNamespace(memory=memory))
        sys.modules.pop("torch.utils", None)
        with tempfile.TemporaryDirectory() as d, mock.patch.dict(os.environ, {"GPUSCOPE_BUILD_DIR": d}), \
                self.assertWarnsRegex(gpuscope.GpuscopeWarning, r"without gpuscope's shim \(PyTorch's headers were not found"):
            got = gpuscope.use_torch()
        self.assertEqual(got, ("allocator", os.path.realpath(os.environ["GPUSCOPE_LIB"]), "gpuscope_alloc", "gpuscope_free"))
        self.assertIs(seen["current"], got)
        self.assertEqual(gpuscope.torch_shim()["wired"], False)
        self.assertIn("PyTorch's headers were not found", gpuscope.torch_shim()["why"])
        with mock.patch.object(gpuscope, "_lib", mock.Mock(wraps=lib())) as spy:
            with tempfile.TemporaryDirectory() as d, mock.patch.dict(os.environ, {"GPUSCOPE_BUILD_DIR": d}), \
                    self.assertWarns(gpuscope.GpuscopeWarning):
                gpuscope.use_torch()
            spy.gpuscope_print_failures.assert_called_with(1)  # PyTorch's failures raise nothing: written
        lib().gpuscope_print_failures(0)

    def test_the_shim_is_loaded_from_no_folder_others_can_write(self):
        # use_torch loads the shim it built before: from a folder that
        # another user can write (it was a fixed name in /tmp), that user
        # chooses the code this process runs.
        sys.modules["torch"] = types.SimpleNamespace(__version__="planted")
        with tempfile.TemporaryDirectory() as d:
            cache = os.path.join(d, "gpuscope")
            os.makedirs(os.path.join(cache, "torch-planted"))
            os.chmod(cache, 0o777)
            with mock.patch.dict(os.environ, {"XDG_CACHE_HOME": d, "GPUSCOPE_BUILD_DIR": ""}), \
                    self.assertRaisesRegex(gpuscope.GpuscopeError, "others can write"):
                gpuscope._build_shim()
        with tempfile.TemporaryDirectory() as d:
            os.chmod(d, 0o777)  # as /tmp is, but for its sticky bit
            with mock.patch.dict(os.environ, {"XDG_CACHE_HOME": os.path.join(d, "cache")}), \
                    mock.patch.object(tempfile, "tempdir", d), mock.patch.dict(os.environ, {"GPUSCOPE_BUILD_DIR": ""}):
                os.makedirs(os.path.join(d, "gpuscope-torch-planted"))
                with open(os.path.join(d, "gpuscope-torch-planted", "torch_shim.so"), "w") as f:
                    f.write("another user's library")
                try:
                    got = gpuscope._build_shim()
                except gpuscope.GpuscopeError as e:
                    got = str(e)
                self.assertNotIn(os.path.join(d, "gpuscope-torch-planted"), got)
                self.assertEqual(0o700, os.stat(os.path.join(d, "cache", "gpuscope")).st_mode & 0o777,
                                 "the user's cache folder of gpuscope is the user's alone")

    def test_the_shim_is_compiled_in_the_cxx_standard_pytorchs_headers_need(self):
        # PyTorch 2.13 and later refuse C++17 ("C++20 or later compatible
        # compiler is required to use ATen"); the shim was compiled with
        # -std=c++17 whatever the PyTorch.
        ext = types.SimpleNamespace(include_paths=lambda **kw: ["/inc"], library_paths=lambda **kw: ["/lib"])
        for version, std in (("2.5.1+cu124", "-std=c++17"), ("2.11.0+cu130", "-std=c++17"),
                             ("2.13.0", "-std=c++20"), ("2.14.0.dev20260901+cu130", "-std=c++20"),
                             ("3.0.0", "-std=c++20")):
            t = types.SimpleNamespace(__version__=version, _C=types.SimpleNamespace(_GLIBCXX_USE_CXX11_ABI=True),
                                      utils=types.SimpleNamespace(cpp_extension=ext))
            sys.modules.update({"torch": t, "torch.utils": t.utils})
            seen = []

            def compile_(cmd, **kw):
                seen.append(cmd)
                return types.SimpleNamespace(returncode=1, stderr="stopped here")

            with tempfile.TemporaryDirectory() as d, mock.patch.dict(os.environ, {"GPUSCOPE_BUILD_DIR": d}), \
                    mock.patch("subprocess.run", compile_), self.assertRaisesRegex(gpuscope.GpuscopeError, "stopped here"):
                gpuscope._build_shim()
            self.assertIn(std, seen[0], version)

    def test_use_cupy_hands_cupy_function_pointers_that_allocate(self):
        seen = {}

        class CFunctionAllocator:
            def __init__(self, param, malloc, free, owner):
                self.param, self.malloc_addr, self.free_addr, self.owner = param, malloc, free, owner

            def malloc(self, size):
                seen["malloc"] = size
                return types.SimpleNamespace(ptr=1)

        memory = types.SimpleNamespace(CFunctionAllocator=CFunctionAllocator, OutOfMemoryError=MemoryError)
        sys.modules["cupy"] = types.SimpleNamespace(
            cuda=types.SimpleNamespace(memory=memory, set_allocator=lambda f: seen.setdefault("allocator", f),
                                       get_current_stream=lambda: _NULL_STREAM))
        a = gpuscope.use_cupy()
        self.assertEqual(seen["allocator"](4096).ptr, 1)
        self.assertEqual(seen["malloc"], 4096, "CuPy's allocation function is not CFunctionAllocator's malloc")
        self.assertEqual(a.param, 0)
        # The addresses are CuPy's malloc and free: call them as CuPy does.
        malloc = ctypes.CFUNCTYPE(ctypes.c_ssize_t, ctypes.c_ssize_t, ctypes.c_size_t, ctypes.c_int)(a.malloc_addr)
        freefn = ctypes.CFUNCTYPE(None, ctypes.c_ssize_t, ctypes.c_ssize_t, ctypes.c_int)(a.free_addr)
        before = gpuscope.stats()["allocated"]
        with gpuscope.scope("cupy"):
            p = malloc(0, 5 * MiB, 0)
            self.assertNotEqual(p, 0)
            self.assertIn("1 buffer (5.00 MiB)", row("cupy"))
            freefn(0, p, 0)
        self.assertEqual(gpuscope.stats()["allocated"], before)
        self.assertEqual(malloc(0, 0, 0), 0, "size 0 is refused with NULL")


class CupyMalloc(unittest.TestCase):
    """use_cupy's allocation function, in each form it runs in: "python"
    (where cupy_call.c cannot be built), "c" (built, CuPy exporting no C
    function for the stream), "c, capsule" (the stream from CuPy's C
    function, as CuPy's pool reads it) and "c, record" (the stream from
    CuPy's record of the thread, over testdata/cupystandin's C stand-in of
    cupy_backends.cuda.stream), over a stand-in CuPy whose
    CFunctionAllocator calls the library's functions as CuPy does."""

    FORMS = ("python", "c", "c, capsule", "c, record")

    def setUp(self):
        self.saved = _modules(("cupy", "cupy_backends", "cupy_backends.cuda", "cupy_backends.cuda.stream"))
        self.now = _NULL_STREAM  # the calling thread's current stream

    @property
    def now(self):
        return self._now

    @now.setter
    def now(self, stream):
        # CuPy's Stream.use(): the record of "c, record" follows.
        self._now = stream
        _stream_standin().use(stream.ptr)

    def tearDown(self):
        _restore(self.saved)
        gpuscope.set_max_reserved(0)

    def use_cupy(self, form, oom=MemoryError, current_stream=None, allocator=None, signature=b"intptr_t (void)"):
        """use_cupy over the stand-in, in form, with CFunctionAllocator the
        class allocator where given, and CuPy's C function (in "c, capsule")
        exported under signature; returns the function CuPy was given."""
        seen = {}
        memory = types.SimpleNamespace(CFunctionAllocator=allocator or _CupyCFunctionAllocator, OutOfMemoryError=oom)
        sys.modules["cupy"] = types.SimpleNamespace(cuda=types.SimpleNamespace(
            memory=memory, set_allocator=lambda f: seen.setdefault("allocator", f),
            get_current_stream=current_stream or (lambda: self.now)))
        for name in ("cupy_backends", "cupy_backends.cuda", "cupy_backends.cuda.stream"):
            sys.modules[name] = types.ModuleType(name)
        if form == "c, capsule":
            sys.modules["cupy_backends.cuda.stream"].__pyx_capi__ = {
                "get_current_stream_ptr": self.capsule(signature, lambda: self.now.ptr)}
        if form == "c, record":
            sys.modules["cupy_backends.cuda.stream"] = _stream_standin()
        if form == "python":
            with mock.patch.object(gpuscope, "_cupy_ext", lambda: (None, "no compiler, in this test")), \
                    self.assertWarnsRegex(gpuscope.GpuscopeWarning, r"runs in Python \(no compiler, in this test\)"):
                gpuscope.use_cupy()
        else:
            gpuscope.use_cupy()
        return seen["allocator"]

    def capsule(self, name, fn):
        """A capsule of the C function intptr_t (void) that calls fn, as
        Cython exports one, named name."""
        self._keep = (ctypes.create_string_buffer(name), ctypes.CFUNCTYPE(ctypes.c_ssize_t)(fn))
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        return new(ctypes.cast(self._keep[1], ctypes.c_void_p), ctypes.addressof(self._keep[0]), None)

    def test_it_raises_cupys_out_of_memory_error_past_the_cap(self):
        class OutOfMemoryError(MemoryError):
            def __init__(self, size, total, limit=0):
                super().__init__(f"Out of memory allocating {size:,} bytes (allocated so far: {total:,} bytes).")

        for form in self.FORMS:
            with self.subTest(form):
                malloc = self.use_cupy(form, OutOfMemoryError)
                gpuscope.empty_cache()
                gpuscope.set_max_reserved(gpuscope.stats()["reserved"] + 2 * MiB)
                for stream in (_NULL_STREAM, types.SimpleNamespace(ptr=0x7300)):
                    self.now = stream
                    with self.assertRaises(OutOfMemoryError) as caught:
                        malloc(64 * MiB)
                    self.assertIn("cap", str(caught.exception.__cause__))
                    self.assertTrue(any("cap" in n for n in getattr(caught.exception, "__notes__", [])))
                    self.assertEqual(malloc(0).ptr, 0, "size 0 is no failure")
                    mem = malloc(MiB)  # under the cap, after
                    self.assertNotEqual(mem.ptr, 0)
                    mem.free()
                self.now = _NULL_STREAM
                gpuscope.set_max_reserved(0)

    def test_a_null_counted_inside_another_allocation_is_not_its_refusal(self):
        # The C form reads the MemoryPointer's ptr only where gpuscope
        # returned NULL during the call: the NULL may be that of an
        # allocation that ran inside it (a finalizer's, as CuPy builds the
        # MemoryPointer), and the call's own allocation may fail while one
        # inside it succeeds.
        inner = []

        class Allocator(_CupyCFunctionAllocator):
            def malloc(self, size):
                mem = super().malloc(size)
                if inner:
                    inner.pop()()
                return mem

        for form in self.FORMS:
            with self.subTest(form):
                malloc = self.use_cupy(form, allocator=Allocator)
                gpuscope.empty_cache()
                gpuscope.set_max_reserved(gpuscope.stats()["reserved"] + 4 * MiB)

                def refused():
                    with self.assertRaises(MemoryError):
                        malloc(64 * MiB)

                inner.append(refused)
                mem = malloc(MiB)
                self.assertNotEqual(mem.ptr, 0)
                self.assertEqual(inner, [], "the inner allocation ran")
                got = []
                inner.append(lambda: got.append(malloc(MiB)))
                with self.assertRaises(MemoryError):
                    malloc(64 * MiB)
                self.assertNotEqual(got[0].ptr, 0)
                inner.append(refused)
                self.assertEqual(malloc(0).ptr, 0, "a call of size 0, inside which an allocation was refused")
                for m in (mem, got[0]):
                    m.free()
                gpuscope.set_max_reserved(0)

    def test_a_streams_blocks_stay_on_it_as_in_cupys_pool(self):
        # CuPy's pool gives a block freed under stream S only to later
        # allocations under S. CFunctionAllocator passes no stream: a block
        # that kernels on S still read when CuPy freed it served the next
        # allocation on any stream at once.
        for form in self.FORMS:
            with self.subTest(form):
                malloc = self.use_cupy(form)
                failures = gpuscope.stats()["c_failures"]
                side = types.SimpleNamespace(ptr=0x7200)  # a cupy.cuda.Stream
                self.now = side
                a = malloc(4 * MiB)
                p = a.ptr
                a.free()  # CuPy drops the array while S's kernels may still read it
                self.now = _NULL_STREAM
                b = malloc(4 * MiB)
                self.assertNotEqual(b.ptr, p, "a block freed under a side stream served the default stream at once")
                self.now = side
                c = malloc(4 * MiB)
                self.assertEqual(c.ptr, p, "a block freed under a stream serves that stream's next allocation")
                for m in (b, c):
                    m.free()
                # cudaStreamPerThread (CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1)
                # names each thread's own default stream: gpuscope would wait
                # on the calling thread's alone. Its blocks stay the legacy
                # default stream's, whose work waits for every thread's.
                self.now = types.SimpleNamespace(ptr=2)
                d = malloc(4 * MiB)
                d.free()
                self.now = _NULL_STREAM
                e = malloc(4 * MiB)
                self.assertEqual(e.ptr, d.ptr, "a per-thread default stream's block is not the default stream's")
                e.free()
                self.assertEqual(gpuscope.stats()["c_failures"], failures)

    def test_each_form_says_how_it_runs(self):
        for form, c_stream, record, how in (("python", None, None, "Python: no compiler, in this test"),
                                            ("c", False, False, "C, the stream from cupy.cuda.get_current_stream"),
                                            ("c, capsule", True, False, "C, the stream from CuPy's C function"),
                                            ("c, record", True, True, "C, the stream from CuPy's record of the thread")):
            with self.subTest(form):
                malloc = self.use_cupy(form)
                self.assertEqual(getattr(malloc, "c_stream", None), c_stream)
                self.assertEqual(getattr(malloc, "record", None), record)
                self.assertEqual(gpuscope._cupy_how, how)

    def test_each_thread_reads_its_own_stream_from_its_record(self):
        # A thread's first call keeps its record; later calls read the
        # stream from it, and another thread's from its own.
        malloc = self.use_cupy("c, record")
        side = types.SimpleNamespace(ptr=0x7500)
        self.now = side
        a = malloc(4 * MiB)  # this thread's first call
        p = a.ptr
        a.free()  # on the side stream: it serves that stream's next allocation only
        got, other = {}, threading.Thread(target=lambda: got.setdefault("b", malloc(4 * MiB)))
        other.start()  # its stream is the default one: it may not have p
        other.join()
        self.assertNotEqual(got["b"].ptr, p, "another thread read this thread's side stream")
        c = malloc(4 * MiB)
        self.assertEqual(c.ptr, p, "this thread's later call read its side stream from its record")
        for m in (got["b"], c):
            m.free()
        self.now = _NULL_STREAM

    def test_a_later_thread_state_on_the_same_thread_reads_its_own_record(self):
        # A thread made in C that calls into Python gets a thread state for
        # each call, and CuPy a record for each: the second call may not
        # read the first's record, which the function still holds.
        params = []

        class Allocator(_CupyCFunctionAllocator):
            def malloc(self, size):  # its param: 0, or the stream it allocates for
                params.append(self.param)
                return super().malloc(size)

        malloc = self.use_cupy("c, record", allocator=Allocator)

        def call():
            if not params:
                self.now = types.SimpleNamespace(ptr=0x7800)  # the first thread state's stream
            malloc(MiB).free()

        _stream_standin().calls_on_one_thread(call, 2)
        self.now = _NULL_STREAM
        self.assertEqual(params, [0x7800, 0], "the second thread state read the first's stream from its record")

    def test_with_several_devices_the_current_devices_stream_is_read(self):
        # CuPy's record keeps a handle a device and its function reads the
        # current device's: where there are several, the function calls it.
        params = []

        class Allocator(_CupyCFunctionAllocator):
            def malloc(self, size):
                params.append(self.param)
                return super().malloc(size)

        malloc, standin = self.use_cupy("c, record", allocator=Allocator), _stream_standin()

        def work():  # a thread of its own: its record, made now, has two devices
            for d, ptr in ((0, 0x7900), (1, 0x7a00)):  # the thread's first call, and a later one
                standin.device(d)
                self.now = types.SimpleNamespace(ptr=ptr)  # the device's stream
                malloc(MiB).free()

        standin.devices(2)
        try:
            t = threading.Thread(target=work)
            t.start()
            t.join()
        finally:
            standin.devices(1)
            standin.device(0)
            self.now = _NULL_STREAM
        self.assertEqual(params, [0x7900, 0x7a00], "device 0's stream was read on device 1")

    def test_a_thread_that_exits_lets_its_record_go(self):
        # The function holds a reference to each thread's record; a thread
        # that exits gives it up, at the next thread's first call.
        malloc = self.use_cupy("c, record")
        standin = _stream_standin()
        malloc(MiB).free()
        before = standin.records()

        def thread():
            t = threading.Thread(target=lambda: malloc(MiB).free())
            t.start()
            t.join()

        for _ in range(8):
            thread()
        # join() returns as the thread's Python state goes; its OS thread
        # hands the record on as it exits, which may come after the next
        # thread's first call: a few more threads see the earlier ones' go.
        for _ in range(64):
            if standin.records() <= before + 1:
                break
            thread()
        self.assertLessEqual(standin.records(), before + 1, "the records of threads that exited are still held")

    def test_a_record_of_another_layout_is_not_read(self):
        # A CuPy whose record keeps the stream elsewhere: record_offset's
        # probe through CuPy's set_current_stream_ptr does not find it
        # where it reads, and the stream comes from CuPy's C function.
        ext, _ = gpuscope._cupy_ext()
        capi = _stream_standin().__pyx_capi__
        get, put = capi["get_current_stream_ptr"], capi["set_current_stream_ptr"]
        self.now = types.SimpleNamespace(ptr=0x7600)
        self.assertEqual(ext.record_offset(1.5j, get, put), -1)
        self.assertEqual(ext.stream_of(get), 0x7600, "the probe put the thread's stream back")
        # Of the size and flags of CuPy's record, but its last field a
        # count (16), not an object: not read as one.
        self.assertEqual(ext.record_offset(itertools.repeat(None, 16), get, put), -1)
        with self.assertRaises(TypeError):
            ext.record_offset(1.5j, put, get)
        self.now = _NULL_STREAM

    def test_a_probe_that_fails_midway_puts_the_threads_stream_back(self):
        # CuPy's set_ or get_current_stream_ptr raising after record_offset
        # set a probe handle: the thread is not left on it (every kernel it
        # launched there would fail), and the error passes up as it is.
        ext, _ = gpuscope._cupy_ext()
        standin = _stream_standin()
        get, put = standin.__pyx_capi__["get_current_stream_ptr"], standin.__pyx_capi__["set_current_stream_ptr"]
        self.now = types.SimpleNamespace(ptr=0x7700)
        record = next(vars(o)["tls"] for o in gc.get_objects()
                      if type(o) is threading.local and type(vars(o).get("tls")) is standin._ThreadLocal)
        # The first probe's set, the second's, the restoring one raises;
        # the get before the probes, the first's check, the second's.
        for gets, sets in ((-1, 0), (-1, 1), (-1, 2), (0, -1), (1, -1), (2, -1)):
            with self.subTest(gets=gets, sets=sets):
                standin.fail_after(gets, sets)
                with self.assertRaisesRegex(RuntimeError, "fail_after"):
                    ext.record_offset(record, get, put)
                self.assertEqual(ext.stream_of(get), 0x7700, "the probe left the thread on a probe handle")
        standin.fail_after(0, -1)
        with self.assertRaisesRegex(RuntimeError, "fail_after"):
            ext.stream_of(get)
        self.now = _NULL_STREAM

    def test_an_error_of_cupys_c_function_in_a_threads_first_call_passes_up(self):
        # CuPy built with Cython 3 returns -1 with an exception set from
        # get_current_stream_ptr (its exception value): the thread's first
        # call, which then looks for the thread's record, raises it rather
        # than allocate on the default stream.
        malloc = self.use_cupy("c, record")
        standin, got = _stream_standin(), {}

        def first():
            standin.fail_after(0, -1)
            try:
                got["mem"] = malloc(MiB)
            except RuntimeError as e:
                got["error"] = e

        t = threading.Thread(target=first)
        t.start()
        t.join()
        if "mem" in got:
            got["mem"].free()
        self.assertRegex(str(got.get("error")), "fail_after", "an allocation went on though CuPy's function raised")

    def test_a_local_per_greenlet_is_not_taken_for_cupys_per_thread_one(self):
        # gevent's monkey-patching makes threading.local its own, one dict
        # per greenlet (a CuPy imported after it keeps a record per
        # greenlet): a record read per thread state would give one
        # greenlet another's stream. use_cupy looks for CPython's local
        # only, whatever threading.local names now.
        ext, _ = gpuscope._cupy_ext()
        standin = _stream_standin()
        capsule = standin.__pyx_capi__["get_current_stream_ptr"]
        ext.stream_of(capsule)  # this thread's record, in the stand-in's local

        class local:  # gevent.local.local
            pass

        sys.modules["cupy_backends.cuda.stream"] = standin
        with mock.patch.object(threading, "local", local):
            patched = local()
            patched.tls = next(vars(o)["tls"] for o in gc.get_objects()
                               if gpuscope._per_thread_state(o) and type(vars(o).get("tls")) is standin._ThreadLocal)
            found = gpuscope._cupy_stream_record(ext, capsule)
        self.assertIsNotNone(found)
        self.assertIsNot(found[0], patched, "a local per greenlet was read as CuPy's per thread")

    def test_a_capsule_of_another_signature_is_not_called(self):
        # A CuPy whose Cython exports get_current_stream_ptr with another
        # signature: the C form reads the stream from get_current_stream.
        malloc = self.use_cupy("c, capsule", signature=b"intptr_t (int)")
        self.assertFalse(malloc.c_stream)
        self.now = types.SimpleNamespace(ptr=0x7400)
        mem = malloc(MiB)
        self.assertNotEqual(mem.ptr, 0)
        mem.free()

    def test_where_it_cannot_be_built_the_error_says_why(self):
        with tempfile.TemporaryDirectory() as d, mock.patch.dict(os.environ, {"GPUSCOPE_BUILD_DIR": d, "CC": "false"}):
            with self.assertRaisesRegex(gpuscope.GpuscopeError, r"compiling .*cupy_call\.c failed"):
                gpuscope._build_cupy_ext()
            with mock.patch("sysconfig.get_paths", lambda: {"include": d}), \
                    self.assertRaisesRegex(gpuscope.GpuscopeError, r"no Python.h in .*python3-dev"):
                gpuscope._build_cupy_ext()
            self.assertEqual(os.listdir(d), [], "a failed build leaves nothing")

    def test_its_calls_are_cupys(self):
        # One argument, the size; an error of CuPy's stream lookup passes up.
        for form in self.FORMS:
            with self.subTest(form):
                def broken():
                    raise RuntimeError("cudaErrorNoDevice")

                malloc = self.use_cupy(form, current_stream=broken)
                if form in ("c, capsule", "c, record"):
                    mem = malloc(MiB)  # its stream comes from CuPy's C function
                    mem.free()
                else:
                    with self.assertRaisesRegex(RuntimeError, "cudaErrorNoDevice"):
                        malloc(MiB)
                for args in ((), (MiB, 0)):
                    with self.assertRaises(TypeError):
                        malloc(*args)


_NULL_STREAM = types.SimpleNamespace(ptr=0)  # cupy.cuda.Stream.null

_standin = []


def _stream_standin():
    """testdata/cupystandin's cupy_backends.cuda.stream, whose records are
    C objects as Cython's are: loaded once."""
    if not _standin:
        import importlib.util

        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "cupystandin",
                            "cupy_backends", "cuda", "stream.py")
        spec = importlib.util.spec_from_file_location("cupystandin_stream", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _standin.append(mod)
    return _standin[0]


class _CupyCFunctionAllocator:
    """cupy.cuda.memory.CFunctionAllocator: malloc(param, size, device) for
    an array (none for size 0: its ptr is 0), and free(param, ptr, device)
    when CuPy drops it (free())."""

    def __init__(self, param, malloc, free, owner):
        self.param, self.owner = param, owner
        self.m = ctypes.CFUNCTYPE(ctypes.c_ssize_t, ctypes.c_ssize_t, ctypes.c_size_t, ctypes.c_int)(malloc)
        self.f = ctypes.CFUNCTYPE(None, ctypes.c_ssize_t, ctypes.c_ssize_t, ctypes.c_int)(free)

    def malloc(self, size):
        ptr = self.m(self.param, size, 0) if size else 0
        return types.SimpleNamespace(ptr=ptr, free=lambda: ptr and self.f(self.param, ptr, 0))


class TorchShim(unittest.TestCase):
    """use_torch over PyTorch stand-ins (testdata/torchstandin, which
    python_test.go builds and names in GPUSCOPE_TORCH_STANDIN): the shim
    compiled against their headers as against PyTorch's, and PyTorch's
    calls through CUDAPluggableAllocator's std::function hooks."""

    @classmethod
    def setUpClass(cls):
        d = os.environ.get("GPUSCOPE_TORCH_STANDIN")
        if not d:
            raise unittest.SkipTest("GPUSCOPE_TORCH_STANDIN names no stand-in build (python_test.go makes one)")
        cls.saved = _modules(("torch", "torch.utils", "torch.utils.cpp_extension"))
        cls.standin = ctypes.CDLL(os.path.join(d, "lib", "libtorch_cuda.so"))
        t = cls.torch = _standin_torch(cls.standin, d)
        sys.modules.update({"torch": t, "torch.utils": t.utils, "torch.utils.cpp_extension": t.utils.cpp_extension})
        gpuscope.use_torch()

    @classmethod
    def tearDownClass(cls):
        _restore(cls.saved)

    def tearDown(self):
        gpuscope.set_max_reserved(0)

    def test_the_shim_is_wired(self):
        self.assertTrue(gpuscope.torch_shim()["wired"], gpuscope.torch_shim())
        self.assertEqual(gpuscope.torch_shim()["graphs_refused"], 1, "the graph-pool hooks of this shape refuse")

    def test_an_allocation_past_the_cap_raises_out_of_memory_and_the_process_goes_on(self):
        t = self.torch
        p = t.empty(4 * MiB)
        gpuscope.empty_cache()
        gpuscope.set_max_reserved(gpuscope.stats()["reserved"] + 2 * MiB)
        with gpuscope.scope("holder"):
            with self.assertRaises(t.cuda.OutOfMemoryError) as caught:
                t.empty(64 * MiB)
        msg = str(caught.exception)
        self.assertIn("CUDA out of memory. Tried to allocate 64.00 MiB (67108864 bytes) on device 0 through gpuscope", msg)
        self.assertIn("cap", msg)
        self.assertIn("holder", msg)
        self.assertEqual(gpuscope.torch_shim()["out_of_memory"], 1)
        q = t.empty(MiB)  # under the cap, after
        t.free(q)
        t.free(p)
        self.assertEqual(t.empty(0), 0, "size 0 is no failure")

    def test_any_other_refusal_is_a_runtime_error(self):
        with self.assertRaisesRegex(RuntimeError, "gpuscope could not allocate") as caught:
            self.torch.empty(1 << 62)
        self.assertNotIsInstance(caught.exception, self.torch.cuda.OutOfMemoryError)

    def test_empty_cache_reaches_gpuscope(self):
        t = self.torch
        t.free(t.empty(8 * MiB))
        gpuscope.stats()  # what the pair cache held goes back to the pool
        self.assertGreater(gpuscope.stats()["cached"], 0)
        t.cuda.empty_cache()
        self.assertEqual(gpuscope.stats()["cached"], 0)
        self.assertGreaterEqual(gpuscope.torch_shim()["empty_cache"], 1)

    def test_the_memory_fraction_caps_gpuscope(self):
        t = self.torch
        total = int(os.environ["GPUSCOPE_HOST_MEMORY"])
        t.cuda.set_per_process_memory_fraction(0.25, 0)
        try:
            with self.assertRaises(t.cuda.OutOfMemoryError):
                t.empty(total // 2)
            t.free(t.empty(total // 8))
        finally:
            t.cuda.set_per_process_memory_fraction(1.0, 0)
        t.free(t.empty(total // 2))
        with self.assertRaisesRegex(RuntimeError, "memory fraction"):
            t.cuda.set_per_process_memory_fraction(1.5, 0)

    def test_a_tensor_freed_asleep_through_the_shim_is_freed(self):
        t = self.torch
        with gpuscope.scope("cache", sleepable=True) as sid:
            p = t.empty(4 * MiB)
        gpuscope.sleep("cache", keep=False)
        failures = gpuscope.stats()["c_failures"]
        t.free(p)
        st = gpuscope.stats()
        self.assertEqual(st["c_failures"], failures, st["c_last_error"])
        self.assertEqual(st["sleeping"], 0)
        self.assertEqual(lib().gpuscope_scope_end(sid, 0), 0)
        self.assertIsNone(row("cache"), "it held nothing: it ended")

    def test_record_stream_reaches_gpuscope(self):
        t = self.torch
        p = t.empty(MiB)
        before, failures = gpuscope.torch_shim()["record_stream"], gpuscope.stats()["c_failures"]
        t.record_stream(p, 0x7100)
        self.assertEqual(gpuscope.torch_shim()["record_stream"], before + 1)
        self.assertEqual(gpuscope.stats()["c_failures"], failures, "gpuscope refused the record")
        t.free(p)

    def test_record_stream_of_an_empty_tensor_does_nothing(self):
        # An empty tensor's storage has no memory: PyTorch's wrapper hands
        # record_stream its NULL (ProcessGroupNCCL records every input),
        # which c10's allocator skips quietly.
        failures = gpuscope.stats()["c_failures"]
        self.torch.record_stream(0, 0x7100)
        self.assertEqual(gpuscope.stats()["c_failures"], failures, "record_stream(NULL) failed")

    def test_graph_capture_is_refused_with_why(self):
        with self.assertRaisesRegex(RuntimeError, r"CUDA graph capture \(torch.cuda.graph\)"):
            self.torch.cuda.graph_capture()


def _standin_torch(h, folder):
    """A torch module over the stand-in libtorch_cuda.so h: what use_torch
    reads of PyTorch, and what PyTorch does through the allocator."""
    c = ctypes

    def call(fn, *args):
        msg = c.create_string_buffer(4096)
        kind = fn(*args, msg, 4096)
        if kind == 1:
            raise t.cuda.OutOfMemoryError(msg.value.decode())
        if kind:
            raise RuntimeError(msg.value.decode())

    class OutOfMemoryError(RuntimeError):
        pass

    class CUDAPluggableAllocator:
        def __init__(self, path, alloc, free):
            lib = c.CDLL(path)
            self.alloc = c.cast(getattr(lib, alloc), c.c_void_p)
            self.free = c.cast(getattr(lib, free), c.c_void_p)

    def empty(size):
        out = c.c_void_p()
        call(h.standin_malloc, c.c_size_t(size), None, c.byref(out))
        return out.value or 0

    ext = types.SimpleNamespace(include_paths=lambda **kw: [os.path.join(folder, "include")],
                                library_paths=lambda **kw: [os.path.join(folder, "lib")])
    cuda = types.SimpleNamespace(
        OutOfMemoryError=OutOfMemoryError,
        memory=types.SimpleNamespace(
            CUDAPluggableAllocator=CUDAPluggableAllocator,
            change_current_allocator=lambda a: h.standin_use(a.alloc, a.free)),
        empty_cache=lambda: call(h.standin_empty_cache),
        set_per_process_memory_fraction=lambda f, d: call(h.standin_set_memory_fraction, c.c_double(f), d),
        graph_capture=lambda: call(h.standin_graph_capture),
        is_initialized=lambda: True, synchronize=lambda device=None: None)  # gpuscope.sleep's
    t = types.SimpleNamespace(
        __version__="standin", _C=types.SimpleNamespace(_GLIBCXX_USE_CXX11_ABI=True),
        utils=types.SimpleNamespace(cpp_extension=ext), cuda=cuda, empty=empty,
        free=lambda p: call(h.standin_free, c.c_void_p(p)),
        record_stream=lambda p, s: call(h.standin_record_stream, c.c_void_p(p), c.c_void_p(s)))
    return t


if __name__ == "__main__":
    unittest.main()
