package main

import (
	"bytes"
	"compress/gzip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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

// pressureBuild writes, in a new folder, what pressure-gpu.sh build writes
// for a stand-in run (driver.txt says sim), with gpumem and the earlier
// pools' gpumem-before-COMMIT the shell script given and two workloads in
// caps.txt; pressure-gpu.sh run reads it through PRESSURE_DIR.
func pressureBuild(t *testing.T, gpumem string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"gpumem", "gpumem-before-a682b2e", "gpumem-before-c633d74"} {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		_, err := w.Write([]byte(gpumem))
		require.NoError(t, err)
		require.NoError(t, w.Close())
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".gz"), b.Bytes(), 0o644))
	}
	for name, text := range map[string]string{
		"caps.txt":   "mlp_train 1000000 10\nresnet50_train 2000000 20\n",
		"commit.txt": "test\n",
		"driver.txt": "sim\n",
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}
	return dir
}

// pressureRun is pressure-gpu.sh run LOGDIR OUTDIR SECTIONS... on the build
// in dir, PyTorch's lines those an H200 run recorded, with env's settings.
func pressureRun(t *testing.T, dir string, env []string, sections ...string) (cmd *exec.Cmd, logs, out string) {
	t.Helper()
	tmp := t.TempDir()
	logs, out = filepath.Join(tmp, "logs"), filepath.Join(tmp, "out")
	args := append([]string{filepath.Join("..", "..", "scripts", "measure", "pressure-gpu.sh"), "run", logs, out}, sections...)
	cmd = exec.Command("bash", args...)
	// Where the harness leaves a replay running, Wait ends anyway.
	cmd.WaitDelay = 10 * time.Second
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "RUNS=") && !strings.HasPrefix(e, "BUDGET=") && !strings.HasPrefix(e, "TORCH_SH=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(append(cmd.Env, "PRESSURE_DIR="+dir, "TORCH_SH=scripts/measure/torch_recorded.sh"), env...)
	return cmd, logs, out
}

// exitCode is the status cmd exited with, after err from its Wait.
func exitCode(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	return exit.ExitCode()
}

// packed lists the files of OUTDIR/pressure.tgz.
func packed(t *testing.T, out string) []string {
	t.Helper()
	list, err := exec.Command("tar", "tzf", filepath.Join(out, "pressure.tgz")).CombinedOutput()
	require.NoError(t, err, "%s", list)
	return strings.Fields(string(list))
}

// requireGone waits for the process whose pid the file holds to be gone.
func requireGone(t *testing.T, pidFile string) {
	t.Helper()
	pid, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	// The KILL is delivered, and the process reaped, a moment after the
	// harness goes on.
	require.Eventually(t, func() bool {
		return exec.Command("kill", "-0", strings.TrimSpace(string(pid))).Run() != nil
	}, 20*time.Second, 50*time.Millisecond, "the replay is gone")
}

// TestThePressureHarnessStandInIsNoVerdict runs pressure-gpu.sh's stand-in
// (a build with DRIVER=sim), with a gpumem whose every replay fits: each
// row holds, and still the run ends STAND-IN VERDICT and exits 2, so that a
// stand-in build carried to the device never reads as a pass.
func TestThePressureHarnessStandInIsNoVerdict(t *testing.T) {
	requirePython(t)
	t.Parallel()
	fits := `#!/bin/bash
echo '{"ooms": 0, "peak_requested_bytes": 1000000, "peak_reserved_bytes": 1000000, "reserved_ratio": 1.0, "source_allocs": 1, "repetitions": [{"wall_ns": 1000}]}'
`
	cmd, logs, out := pressureRun(t, pressureBuild(t, fits), []string{"RUNS=2"}, "smallest", "free")
	output, err := cmd.CombinedOutput()
	require.Equal(t, 2, exitCode(t, err), "%s", output)
	verdict, err := os.ReadFile(filepath.Join(out, "verdict.txt"))
	require.NoError(t, err)
	require.Regexp(t, `\nSTAND-IN VERDICT: PASS: 2 workloads, 4 rows: 4 PASS, 0 TIE, 0 FAIL\n$`, string(verdict))
	require.Contains(t, string(output), string(verdict))
	require.Contains(t, string(verdict), "(2 runs, 0 out of memory)")
	require.NoFileExists(t, filepath.Join(logs, "notrun.txt"), "everything ran")
	runs, err := os.ReadFile(filepath.Join(logs, "runs.txt"))
	require.NoError(t, err)
	require.Equal(t, "2\n", string(runs))
	list := packed(t, out)
	for _, f := range []string{"./verdict.txt", "./tables.md", "./runs.txt", "./driver.txt", "./machine.txt",
		"./smallest_gpuscope.jsonl", "./smallest_torch.jsonl", "./free_gpuscope.jsonl", "./free_torch.jsonl"} {
		require.Contains(t, list, f)
	}
}

// TestThePressureHarnessKeepsWhatATermLeft sends TERM to pressure-gpu.sh
// while a replay hangs: the replay is stopped, and verdict.txt, which says
// what did not run, and pressure.tgz are in OUTDIR, where a device run's
// command returns them.
func TestThePressureHarnessKeepsWhatATermLeft(t *testing.T) {
	requirePython(t)
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "replay.pid")
	hangs := "#!/bin/bash\necho $$ > " + pidFile + ".part\nmv " + pidFile + ".part " + pidFile + "\nexec sleep 300\n"
	cmd, logs, out := pressureRun(t, pressureBuild(t, hangs), []string{"RUNS=1"}, "smallest", "free")
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	require.NoError(t, cmd.Start())
	require.Eventually(t, func() bool {
		_, err := os.Stat(pidFile)
		return err == nil
	}, time.Minute, 50*time.Millisecond, "the first replay starts")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 143, exitCode(t, cmd.Wait()), "%s", output.String())
	requireGone(t, pidFile)

	verdict, err := os.ReadFile(filepath.Join(out, "verdict.txt"))
	require.NoError(t, err)
	require.Contains(t, string(verdict), "\nNOT RUN: smallest: stopped by TERM during gpumem replay --driver sim")
	require.Contains(t, string(verdict), "\nNOT RUN: free: not begun, the run got TERM first\n")
	require.Contains(t, string(verdict), "FAIL cap   mlp_train                missing: no line for gpuscope at its cap")
	require.Regexp(t, `\nSTAND-IN VERDICT: FAIL: 2 workloads, 4 rows: 0 PASS, 0 TIE, 4 FAIL; 2 parts not run \(NOT RUN above\)\n$`, string(verdict))
	require.Contains(t, output.String(), string(verdict))
	list := packed(t, out)
	for _, f := range []string{"./verdict.txt", "./notrun.txt", "./machine.txt", "./runs.txt", "./smallest_torch.jsonl"} {
		require.Contains(t, list, f)
	}
	machine, err := os.ReadFile(filepath.Join(logs, "machine.txt"))
	require.NoError(t, err)
	require.Regexp(t, `\nend .* \([0-9]+ s\)\n$`, string(machine))
}

// TestThePressureHarnessStopsAtItsBudget runs pressure-gpu.sh with a
// replay that hangs and ignores TERM, under a BUDGET of 10 s: the replay
// is killed 10 s after the budget's end, the section stops before its next
// workload, the next section is skipped, and the verdict says so.
func TestThePressureHarnessStopsAtItsBudget(t *testing.T) {
	requirePython(t)
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "replay.pid")
	hangs := "#!/bin/bash\ntrap '' TERM\necho $$ > " + pidFile + "\nexec sleep 300\n"
	cmd, _, out := pressureRun(t, pressureBuild(t, hangs), []string{"RUNS=1", "BUDGET=10"}, "smallest", "free")
	output, err := cmd.CombinedOutput()
	require.Equal(t, 2, exitCode(t, err), "%s", output)
	requireGone(t, pidFile)

	verdict, err := os.ReadFile(filepath.Join(out, "verdict.txt"))
	require.NoError(t, err)
	require.Contains(t, string(verdict), "\nNOT RUN: smallest: cut at the end of BUDGET=10 (exit 137): gpumem replay --driver sim")
	require.Regexp(t, `\nNOT RUN: smallest: stopped before resnet50_train and what follows it: [0-9]+ s gone of BUDGET=10\n`, string(verdict))
	require.Regexp(t, `\nNOT RUN: free: skipped, [0-9]+ s gone of BUDGET=10\n`, string(verdict))
	require.Contains(t, string(verdict), "\nSTAND-IN VERDICT: FAIL")
	require.Contains(t, packed(t, out), "./verdict.txt")
}

// TestThePressureHarnessRefusesALogdirThatHoldsFiles runs pressure-gpu.sh
// into the LOGDIR of a run before it, as on a device kept warm between
// calls: it refuses, replays nothing and leaves the earlier logs as they
// were, which its verdict would have read beside its own.
func TestThePressureHarnessRefusesALogdirThatHoldsFiles(t *testing.T) {
	t.Parallel()
	ran := filepath.Join(t.TempDir(), "ran")
	cmd, logs, out := pressureRun(t, pressureBuild(t, "#!/bin/bash\ntouch "+ran+"\n"), []string{"RUNS=1"}, "free")
	require.NoError(t, os.MkdirAll(logs, 0o755))
	earlier := []byte(`{"ooms": 1, "an earlier run": true}` + "\n")
	require.NoError(t, os.WriteFile(filepath.Join(logs, "free_gpuscope.jsonl"), earlier, 0o644))
	output, err := cmd.CombinedOutput()
	require.Equal(t, 1, exitCode(t, err), "%s", output)
	require.Contains(t, string(output), logs+" is not empty")
	require.NoFileExists(t, ran, "a replay ran")
	got, err := os.ReadFile(filepath.Join(logs, "free_gpuscope.jsonl"))
	require.NoError(t, err)
	require.Equal(t, earlier, got)
	require.NoFileExists(t, filepath.Join(out, "verdict.txt"))
}

// requirePython skips a test of the harness where there is no python3,
// which its verdict needs.
func requirePython(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 on this machine: the harness's verdict needs one")
	}
}
