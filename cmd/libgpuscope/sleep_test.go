package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestScopesSleepFromC runs testdata/sleep.c against the shared library: a
// scope begun sleepable from C, put to sleep with and without its contents,
// its memory taken by another scope meanwhile, woken, and ended.
func TestScopesSleepFromC(t *testing.T) { runC(t, "sleep") }

// TestTheSleepHarness checks what of scripts/measure/sleep-gpu.sh, issue
// 46's GPU run, runs without a GPU: its shell and Python parse, its report
// reads the verdict off logs as it should (sleep_report_test.py), and a run
// over a stand-in of sleep_torch.py packs its logs and ends with a verdict
// that is no GPU's (exit 2).
func TestTheSleepHarness(t *testing.T) {
	python := requirePython3(t)
	dir := filepath.Join("..", "..", "scripts", "measure")
	run(t, dir, "bash", "-n", "sleep-gpu.sh")
	run(t, "", python, "-c", `import sys
for f in sys.argv[1:]:
    compile(open(f).read(), f, "exec")`, filepath.Join(dir, "sleep_torch.py"), filepath.Join(dir, "sleep_report.py"))
	cmd := exec.Command(python, "-m", "unittest", "-v", "sleep_report_test")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)

	cmd, logs, outDir := sleepRun(t)
	output, err := cmd.CombinedOutput()
	require.Equal(t, 2, exitStatus(t, err), "%s", output)
	report, err := os.ReadFile(filepath.Join(outDir, "report.txt"))
	require.NoError(t, err)
	require.Contains(t, string(report), "NOT RUN torch_memory_saver: a stand-in runs no torch_memory_saver")
	require.Contains(t, string(report), "PASS compute-sanitizer")
	require.True(t, strings.HasSuffix(string(report), "STAND-IN VERDICT: PASS (a stand-in ran, not a GPU: no verdict on gpuscope)\n"), "%s", report)
	list := run(t, "", "tar", "tzf", filepath.Join(outDir, "sleep-logs.tgz"))
	for _, f := range []string{"gpuscope.jsonl", "tms.jsonl", "sanitizer.txt", "machine.txt", "commands.txt", "report.txt"} {
		require.Contains(t, list, filepath.Base(logs)+"/"+f)
	}
}

// TestTheSleepHarnessKeepsWhatATermLeft stops sleep-gpu.sh with TERM while
// its first part hangs: it exits 143 with the report and the packed logs
// in OUT, the part stopped and the verdict a stand-in's.
func TestTheSleepHarnessKeepsWhatATermLeft(t *testing.T) {
	requirePython3(t)
	pidFile := filepath.Join(t.TempDir(), "part.pid")
	killLeft(t, pidFile)
	cmd, _, outDir := sleepRun(t, "SLEEP_STANDIN_HANG="+pidFile)
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	require.NoError(t, cmd.Start())
	require.Eventually(t, func() bool {
		_, err := os.Stat(pidFile)
		return err == nil
	}, time.Minute, 20*time.Millisecond, "the first part starts")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 143, exitStatus(t, cmd.Wait()), "%s", output.String())
	report, err := os.ReadFile(filepath.Join(outDir, "report.txt"))
	require.NoError(t, err)
	require.Contains(t, string(report), "FAIL gpuscope.jsonl: stopped, the run got TERM")
	require.Contains(t, string(report), "STAND-IN VERDICT: FAIL")
	require.Contains(t, run(t, "", "tar", "tzf", filepath.Join(outDir, "sleep-logs.tgz")), "/report.txt")
}

// TestTheSleepHarnessStopsAtItsBudget runs sleep-gpu.sh under a BUDGET of
// 2 s with a first part that hangs: it is stopped at the budget's end, and
// the parts after it are listed as not run.
func TestTheSleepHarnessStopsAtItsBudget(t *testing.T) {
	requirePython3(t)
	pidFile := filepath.Join(t.TempDir(), "part.pid")
	killLeft(t, pidFile)
	cmd, _, outDir := sleepRun(t, "SLEEP_STANDIN_HANG="+pidFile, "BUDGET=2")
	output, err := cmd.CombinedOutput()
	require.Equal(t, 2, exitStatus(t, err), "%s", output)
	report, err := os.ReadFile(filepath.Join(outDir, "report.txt"))
	require.NoError(t, err)
	require.Regexp(t, `FAIL gpuscope.jsonl exited 124 after [0-9]+ s, at the budget's end`, string(report))
	require.Regexp(t, `NOT RUN tms.jsonl: -?[0-9]+ s of the budget left, it needs about 1`, string(report))
	require.Contains(t, string(report), "STAND-IN VERDICT: FAIL")
}

// TestTheSleepHarnessRefusesALogdirThatHoldsFiles runs sleep-gpu.sh into
// the LOGDIR of a run before it, as on a device kept warm between calls:
// it refuses. It appended to the earlier logs, and the report printed that
// run's FAIL lines beside its own.
func TestTheSleepHarnessRefusesALogdirThatHoldsFiles(t *testing.T) {
	requirePython3(t)
	cmd, logs, outDir := sleepRun(t)
	requireLogdirRefused(t, cmd, logs)
	require.NoFileExists(t, filepath.Join(outDir, "report.txt"))
}

// requireLogdirRefused runs cmd, a harness's run into logs, after writing
// an earlier run's failures.txt there: it must exit 1 saying why, and
// leave the earlier logs as they were, with no report.
func requireLogdirRefused(t *testing.T, cmd *exec.Cmd, logs string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(logs, 0o755))
	earlier := []byte("part.jsonl: exited 1 after 3 s: an earlier run's failure\n")
	require.NoError(t, os.WriteFile(filepath.Join(logs, "failures.txt"), earlier, 0o644))
	output, err := cmd.CombinedOutput()
	require.Equal(t, 1, exitStatus(t, err), "%s", output)
	require.Contains(t, string(output), logs+" is not empty")
	entries, err := os.ReadDir(logs)
	require.NoError(t, err)
	require.Len(t, entries, 1, "the harness wrote into the earlier run's logs")
	got, err := os.ReadFile(filepath.Join(logs, "failures.txt"))
	require.NoError(t, err)
	require.Equal(t, earlier, got)
}

// sleepRun returns sleep-gpu.sh's run over the stand-in of sleep_torch.py,
// with env added, and its LOGDIR and OUT.
func sleepRun(t *testing.T, env ...string) (*exec.Cmd, string, string) {
	t.Helper()
	logs, out := filepath.Join(t.TempDir(), "sleep"), t.TempDir()
	standIn, err := filepath.Abs(filepath.Join("testdata", "sleep_standin.py"))
	require.NoError(t, err)
	cmd := exec.Command("bash", filepath.Join("..", "..", "scripts", "measure", "sleep-gpu.sh"), "run", logs, out)
	cmd.Env = append(withoutEnv(os.Environ(), "BUDGET", "GIB", "CYCLES", "CAP_GIB"), append(env, "SLEEP_TORCH="+standIn, "PYTHONDONTWRITEBYTECODE=1")...)
	return cmd, logs, out
}

// requirePython3 returns python3's path, and skips the test where there is
// none: the harness's verdict needs it.
func requirePython3(t *testing.T) string {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on this machine: the harness's tests need one")
	}
	return python
}

// exitStatus returns the exit status of a command that ended with err.
func exitStatus(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	return exit.ExitCode()
}

// killLeft kills, when the test ends, the stand-in whose pid is in pidFile,
// where the test failed before the harness stopped it.
func killLeft(t *testing.T, pidFile string) {
	t.Cleanup(func() {
		if pid, err := os.ReadFile(pidFile); err == nil {
			_ = exec.Command("kill", "-KILL", strings.TrimSpace(string(pid))).Run()
		}
	})
}
