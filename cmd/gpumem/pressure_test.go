package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestThePressureHarness checks what of scripts/measure/pressure-gpu.sh,
// which replays gpumem against PyTorch's allocator under the same caps on a
// GPU, runs without one: its shell and Python parse, and the verdict the
// run ends with reads logs as it should (pressure_tables_test.py: an
// out-of-memory at the cap, a missing workload and a ratio over
// expandable's fail; caps within a bisection's step of each other tie).
func TestThePressureHarness(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on this machine: the harness's tests need one")
	}
	dir := filepath.Join("..", "..", "scripts", "measure")
	for _, sh := range []string{"pressure-gpu.sh", "torch.sh", "torch_recorded.sh"} {
		out, err := exec.Command("bash", "-n", filepath.Join(dir, sh)).CombinedOutput()
		require.NoError(t, err, "%s: %s", sh, out)
	}
	out, err := exec.Command(python, "-c", `import sys
for f in sys.argv[1:]:
    compile(open(f).read(), f, "exec")`, filepath.Join(dir, "pressure_tables.py"), filepath.Join(dir, "pressure_report.py")).CombinedOutput()
	require.NoError(t, err, "%s", out)

	cmd := exec.Command(python, "-m", "unittest", "-v", "pressure_tables_test")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "Ran 16 tests")
}
