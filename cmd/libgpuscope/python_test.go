package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestThePythonModule runs python/gpuscope_test.py, the tests of the Python
// module, against the host-memory library: the ctypes layer, scopes, stats
// and the cap, and what the module hands to PyTorch and CuPy (the
// frameworks themselves run over the CUDA library on a GPU, in
// scripts/measure/interop-gpu.sh).
func TestThePythonModule(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on this machine: the Python module's tests need one")
	}
	dir := buildLibrary(t)
	cmd := exec.Command(python, "-m", "unittest", "-v", "gpuscope_test")
	cmd.Dir = "python"
	cmd.Env = append(os.Environ(), "GPUSCOPE_LIB="+filepath.Join(dir, "libgpuscope.so"), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	require.NoError(t, err, "the Python module's tests failed")
	require.Contains(t, string(out), "Ran 11 tests")
}
