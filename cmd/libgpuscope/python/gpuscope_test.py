"""Tests of gpuscope.py over the host-memory library (GPUSCOPE_LIB): the
ctypes layer, scopes, stats, the cap, and what use_torch and use_cupy hand
to PyTorch and CuPy (stand-in modules record it; the real frameworks are
exercised on a GPU by scripts/measure/interop-gpu.sh). python_test.go runs
this file after building the library."""
import ctypes
import os
import re
import sys
import threading
import types
import unittest

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

    def test_another_thread_allocates_in_the_current_scope(self):
        with gpuscope.scope("threads"):
            got = []
            t = threading.Thread(target=lambda: got.append(alloc(2 * MiB)))
            t.start()
            t.join()
            self.assertIn("1 buffer (2.00 MiB)", row("threads"))
            free(got[0], 2 * MiB)

    def test_a_scope_on_a_device_that_does_not_exist_fails_clearly(self):
        with self.assertRaisesRegex(gpuscope.GpuscopeError, r"scope 'x' on device 7 did not open"):
            with gpuscope.scope("x", device=7):
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


class Cap(unittest.TestCase):
    def tearDown(self):
        gpuscope.set_max_reserved(0)

    def test_an_allocation_past_the_cap_is_null_and_counted(self):
        failures = gpuscope.stats()["c_failures"]
        gpuscope.set_max_reserved(gpuscope.stats()["reserved"] + 2 * MiB)
        self.assertIsNone(alloc(64 * MiB))
        st = gpuscope.stats()
        self.assertEqual(st["c_failures"], failures + 1)
        self.assertIn("cap", st["c_last_error"])
        gpuscope.set_max_reserved(0)
        p = alloc(64 * MiB)
        self.assertIsNotNone(p)
        free(p, 64 * MiB)

    def test_a_cap_on_a_device_that_does_not_exist_raises(self):
        with self.assertRaises(gpuscope.GpuscopeError):
            gpuscope.set_max_reserved(MiB, device=7)


class Loading(unittest.TestCase):
    def test_a_second_library_beside_the_first_is_refused(self):
        with self.assertRaisesRegex(gpuscope.GpuscopeError, "already loaded"):
            gpuscope.load("/nonexistent/libgpuscope.so")

    def test_the_same_path_loads_the_same_library(self):
        self.assertIs(gpuscope.load(os.environ["GPUSCOPE_LIB"]), lib())


class Frameworks(unittest.TestCase):
    def setUp(self):
        self.saved = {k: sys.modules.get(k) for k in ("torch", "cupy")}

    def tearDown(self):
        for k, v in self.saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v

    def test_use_torch_hands_pytorch_this_library_and_its_two_functions(self):
        seen = {}
        memory = types.SimpleNamespace(
            CUDAPluggableAllocator=lambda path, a, f: ("allocator", path, a, f),
            change_current_allocator=lambda x: seen.setdefault("current", x),
        )
        sys.modules["torch"] = types.SimpleNamespace(cuda=types.SimpleNamespace(memory=memory))
        got = gpuscope.use_torch()
        self.assertEqual(got, ("allocator", os.path.realpath(os.environ["GPUSCOPE_LIB"]), "gpuscope_alloc", "gpuscope_free"))
        self.assertIs(seen["current"], got)

    def test_use_cupy_hands_cupy_function_pointers_that_allocate(self):
        seen = {}

        class CFunctionAllocator:
            def __init__(self, param, malloc, free, owner):
                self.param, self.malloc_addr, self.free_addr, self.owner = param, malloc, free, owner

            def malloc(self, size):
                raise AssertionError("not called here")

        memory = types.SimpleNamespace(CFunctionAllocator=CFunctionAllocator)
        sys.modules["cupy"] = types.SimpleNamespace(
            cuda=types.SimpleNamespace(memory=memory, set_allocator=lambda f: seen.setdefault("allocator", f)))
        a = gpuscope.use_cupy()
        self.assertEqual(seen["allocator"], a.malloc)
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


if __name__ == "__main__":
    unittest.main()
