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
// out-of-memory at the cap, a missing workload, fewer runs at the cap than
// the run asked for, a caps.txt without workloads and a ratio over
// expandable's fail; caps within a bisection's step of each other tie; a
// stand-in run's verdict says STAND-IN and exits 2).
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
	requireUnittestOK(t, string(out))
}

// requireUnittestOK fails unless out, python -m unittest's, says that it
// ran tests and that they passed: "Ran N tests" (N at least 1), "OK" on a
// line of its own last, and no test that failed or erred.
func requireUnittestOK(t require.TestingT, out string) {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	require.Regexp(t, `(?m)^Ran [1-9][0-9]* tests? in `, out)
	require.Regexp(t, `(?m)^OK( \(.*\))?\s*\z`, out)
	require.NotRegexp(t, `(?m)^(FAIL|ERROR): |^FAILED`, out)
}

// recordT is a require.TestingT that records a failure instead of ending
// the test.
type recordT struct{ failed bool }

func (r *recordT) Errorf(string, ...any) { r.failed = true }
func (r *recordT) FailNow()              { r.failed = true }

func TestTheUnittestCheckFailsWhatDidNotPass(t *testing.T) {
	ran := "test_a (pressure_tables_test.Check.test_a) ... ok\n\n" +
		"----------------------------------------------------------------------\nRan 22 tests in 0.582s\n\n"
	for _, c := range []struct {
		name, out string
		fails     bool
	}{
		{"tests that passed pass", ran + "OK\n", false},
		{"tests that passed with one skipped pass", ran + "OK (skipped=1)\n", false},
		{"a test that failed fails", "test_a (pressure_tables_test.Check.test_a) ... FAIL\n\n" +
			"======================================================================\nFAIL: test_a (pressure_tables_test.Check.test_a)\n" +
			"----------------------------------------------------------------------\nRan 22 tests in 0.582s\n\nFAILED (failures=1)\n", true},
		{"a test that erred fails", "ERROR: test_a (pressure_tables_test.Check.test_a)\n" + ran + "FAILED (errors=1)\n", true},
		{"no tests fail", "\n----------------------------------------------------------------------\nRan 0 tests in 0.000s\n\nNO TESTS RAN\n", true},
		{"an OK before the end fails", ran + "OK\nTraceback (most recent call last):\n", true},
		{"nothing fails", "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &recordT{}
			requireUnittestOK(r, c.out)
			require.Equal(t, c.fails, r.failed)
		})
	}
}
