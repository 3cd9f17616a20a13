package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

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
	cmd.Env = append(os.Environ(), "GPUSCOPE_LIB="+filepath.Join(dir, "libgpuscope.so"), "PYTHONDONTWRITEBYTECODE=1",
		"GPUSCOPE_HOST_MEMORY=268435456", "GPUSCOPE_TORCH_STANDIN="+torchStandIn(t), "GPUSCOPE_BUILD_DIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	require.NoError(t, err, "the Python module's tests failed")
	require.Contains(t, string(out), "Ran 57 tests")
	require.NotContains(t, string(out), "skipped", "the shim's tests over the stand-ins ran")
}

// TestThePythonPackageInstallsFromTheClone: pip installs the package from
// the clone with no package index (--no-index: no PyPI, no build
// requirement to download), building libgpuscope.so with the go command,
// into a virtual environment whose python then imports gpuscope, with no
// PYTHONPATH and no GPUSCOPE_LIB, and finds the library it packaged. The
// build leaves nothing in the clone (git status).
func TestThePythonPackageInstallsFromTheClone(t *testing.T) {
	venv, env, src := newVenv(t)
	before := gitStatus(src)
	pip := exec.Command(filepath.Join(venv, "bin", "python"), "-m", "pip", "install", "--no-index", "--quiet", src)
	pip.Env = append(env, "PIP_DISABLE_PIP_VERSION_CHECK=1")
	out, err := pip.CombinedOutput()
	require.NoError(t, err, "pip install: %s", out)

	// The package builds use_cupy's function in C from the source it holds.
	use := exec.Command(filepath.Join(venv, "bin", "python"), "-c",
		"import gpuscope; print(gpuscope.path()); print(gpuscope.stats()['device']); print(gpuscope._cupy_ext()[1])")
	use.Dir = t.TempDir() // not the source folder, which holds gpuscope.py
	use.Env = append(env, "GPUSCOPE_HOST_MEMORY=16777216", "GPUSCOPE_BUILD_DIR="+t.TempDir())
	out, err = use.CombinedOutput()
	require.NoError(t, err, "%s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 3, "%s", out)
	require.Equal(t, "None", lines[2], "use_cupy's function was not built in C")
	require.True(t, strings.HasPrefix(lines[0], venv+string(filepath.Separator)), "the library it packaged: %s", lines[0])
	require.True(t, strings.HasSuffix(lines[0], filepath.Join("gpuscope", "libgpuscope.so")), lines[0])
	require.Regexp(t, `^host:\d+ \(host memory, 16.00 MiB\)$`, lines[1])

	require.Equal(t, before, gitStatus(src), "the build left something git shows in the clone")
}

// The library built as docs/interop.md says lands where the Python module
// looks for it, beside gpuscope.py, and git status does not show it nor
// the header cgo writes beside it.
// newVenv makes a virtual environment and returns it, an environment
// without PYTHONPATH and GPUSCOPE_LIB, and the package's source folder.
func newVenv(t *testing.T) (venv string, env []string, src string) {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on this machine: the package needs one")
	}
	venv = filepath.Join(t.TempDir(), "venv")
	run(t, "", python, "-m", "venv", venv)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PYTHONPATH=") && !strings.HasPrefix(kv, "GPUSCOPE_LIB=") {
			env = append(env, kv)
		}
	}
	src, err = filepath.Abs("python")
	require.NoError(t, err)
	return venv, env, src
}

// pip builds the package in its source folder, not where it was run: a
// GPUSCOPE_LIB relative to where it was run names no file there, and the
// error says to give an absolute path rather than that the file is not
// there.
func TestARelativeGPUSCOPE_LIBIsToldToBeAbsolute(t *testing.T) {
	venv, env, src := newVenv(t)
	here := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(here, "libgpuscope.so"), []byte("a library built before"), 0o644))
	pip := exec.Command(filepath.Join(venv, "bin", "python"), "-m", "pip", "install", "--no-index", src)
	pip.Dir = here
	pip.Env = append(env, "PIP_DISABLE_PIP_VERSION_CHECK=1", "GPUSCOPE_LIB=libgpuscope.so")
	out, err := pip.CombinedOutput()
	require.Error(t, err, "%s", out)
	require.Contains(t, string(out), "GPUSCOPE_LIB=libgpuscope.so: no such file in "+src+
		", where pip runs the build, not where pip was run: give an absolute path")
}

func TestTheLibraryBuiltAsTheDocsSayIsWhereTheModuleLooks(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "interop.md"))
	require.NoError(t, err)
	builds := regexp.MustCompile(`go build [^\n]*-buildmode=c-shared -o (\S+) \./cmd/libgpuscope`).FindAllStringSubmatch(string(doc), -1)
	require.NotEmpty(t, builds)
	for _, b := range builds {
		lib := b[1]
		require.Equal(t, "cmd/libgpuscope/python/libgpuscope.so", lib, "where gpuscope.py looks: %s", b[0])
		if _, err := os.Stat(filepath.Join("..", "..", ".git")); err != nil {
			continue // not a clone: nothing for git to show
		}
		for _, f := range []string{lib, strings.TrimSuffix(lib, ".so") + ".h"} {
			check := exec.Command("git", "check-ignore", "-q", f)
			check.Dir = filepath.Join("..", "..")
			require.NoError(t, check.Run(), "git status would show %s", f)
		}
	}
}

// gitStatus is what git status says of the folder dir, short; "" where
// dir is not in a clone.
func gitStatus(dir string) string {
	status := exec.Command("git", "status", "--porcelain", ".")
	status.Dir = dir
	out, _ := status.Output()
	return string(out)
}

// torchStandIn builds testdata/torchstandin into a folder as PyTorch lays
// out its headers and libraries (include/, lib/libtorch_cuda.so,
// libc10_cuda.so, libc10.so), for gpuscope_test.py's tests of the PyTorch
// shim, and returns the folder.
func torchStandIn(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("no g++ here: the PyTorch shim's tests build it")
	}
	dir := t.TempDir()
	src, err := filepath.Abs(filepath.Join("testdata", "torchstandin"))
	require.NoError(t, err)
	require.NoError(t, os.Symlink(filepath.Join(src, "include"), filepath.Join(dir, "include")))
	lib := filepath.Join(dir, "lib")
	require.NoError(t, os.Mkdir(lib, 0o755))
	run(t, "", "g++", "-O1", "-std=c++17", "-shared", "-fPIC", "-Wall", "-Werror", "-I"+filepath.Join(src, "include"),
		filepath.Join(src, "standin.cpp"), "-o", filepath.Join(lib, "libtorch_cuda.so"))
	empty := filepath.Join(dir, "empty.c")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	for _, name := range []string{"libc10_cuda.so", "libc10.so"} {
		run(t, "", "gcc", "-shared", "-fPIC", empty, "-o", filepath.Join(lib, name))
	}
	return dir
}

// TestTheFourThreadServerOnTheHostDevice is issue 43's acceptance of
// scopes per thread on the host device: scripts/measure/interop_server.py
// serves requests from four threads, training steps (their gradients
// allocated by a thread of its own, for the request's stream, as PyTorch's
// autograd thread allocates) and inferences interleaved, each in its own
// scope bound to its thread's stream. Each request's scope holds exactly
// its own bytes while the four are open at once, the Summary names the
// four, and every scope ends with nothing left.
func TestTheFourThreadServerOnTheHostDevice(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on this machine: the server needs one")
	}
	dir := buildLibrary(t)
	cmd := exec.Command(python, filepath.Join("..", "..", "scripts", "measure", "interop_server.py"), "host", "--rounds", "6")
	cmd.Env = append(os.Environ(), "GPUSCOPE_LIB="+filepath.Join(dir, "libgpuscope.so"), "PYTHONDONTWRITEBYTECODE=1",
		"GPUSCOPE_HOST_MEMORY=268435456")
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var got struct {
		Requests      int            `json:"requests"`
		Kinds         map[string]int `json:"kinds"`
		OwnScope      bool           `json:"each_in_its_own_scope"`
		Named         bool           `json:"summaries_name_the_four"`
		EndedCleanly  bool           `json:"ended_cleanly"`
		Failures      int            `json:"c_failures"`
		Errors        []string       `json:"errors"`
		Mismatched    []any          `json:"mismatched"`
		AllocatedLeft int64          `json:"allocated_after"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &got), "%s", out)
	require.Empty(t, got.Errors)
	require.Equal(t, 24, got.Requests)
	require.Equal(t, map[string]int{"train": 12, "infer": 12}, got.Kinds)
	require.True(t, got.OwnScope, "a request's scope held another's bytes, or missed its own: %v", got.Mismatched)
	require.True(t, got.Named, "a Summary did not name the four open requests")
	require.True(t, got.EndedCleanly, "a scope left memory behind: %d bytes allocated after", got.AllocatedLeft)
	require.Zero(t, got.Failures)
}

// TestTheInteropHarness checks what of scripts/measure/interop-gpu.sh, the
// harness that runs the C allocator under PyTorch and CuPy on a GPU, runs
// without one: its shell and Python parse, its report reads the verdicts
// off logs as it should (interop_report_test.py), and its plan keeps the
// timed parts' rounds whole under the budget.
func TestTheInteropHarness(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on this machine: the harness's tests need one")
	}
	dir := filepath.Join("..", "..", "scripts", "measure")
	run(t, dir, "bash", "-n", "interop-gpu.sh")
	scripts, err := filepath.Glob(filepath.Join(dir, "interop_*.py"))
	require.NoError(t, err)
	scripts = append(scripts, filepath.Join("python", "gpuscope.py"))
	require.GreaterOrEqual(t, len(scripts), 8)
	run(t, "", python, append([]string{"-c", `import sys
for f in sys.argv[1:]:
    compile(open(f).read(), f, "exec")`}, scripts...)...)

	cmd := exec.Command(python, "-m", "unittest", "-v", "interop_report_test")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)

	cmd = exec.Command("bash", filepath.Join(dir, "interop-gpu.sh"), "plan")
	cmd.Env = append(os.Environ(), "BUDGET=160", "PARTS=torch streams", "PROCS=3")
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	plan := string(out)
	require.Contains(t, plan, "streams.jsonl", "streams first")
	require.Contains(t, plan, "torch.jsonl: round 1 of 3: SKIPPED", "the second round does not fit whole:\n%s", plan)
	require.Equal(t, 3, strings.Count(plan, "interop_torch.py"), "one round of three modes:\n%s", plan)
	require.NotContains(t, plan, "round 2 of 3", "no round after one that did not fit")

	// A budget too short for three rounds: the rounds give way to the
	// parts after them, which ran last time and must run again.
	cmd = exec.Command("bash", filepath.Join(dir, "interop-gpu.sh"), "plan")
	cmd.Env = append(withoutEnv(os.Environ(), "PARTS", "QUICK", "CUPY_PROCS"), "BUDGET=480", "PROCS=3")
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	plan = string(out)
	require.Contains(t, plan, "torch.jsonl: round 2 of 3: SKIPPED", "the third round gives way:\n%s", plan)
	for _, part := range []string{"sanitizer.txt", "cublas.txt", "cublas_test.txt", "cupy.jsonl"} {
		require.Regexp(t, `(?m)^ +\d+ s  `+regexp.QuoteMeta(part)+` +about`, plan, "%s runs", part)
	}
	require.NotRegexp(t, `(sanitizer|cublas|cupy)\S*: .*SKIPPED`, plan, "a part after the rounds is left out")

	// The default batch, as the device runs it: every part fits its
	// budget, and the budget, a part's kill after its limit and the report
	// fit the device's one command of 600 s.
	cmd = exec.Command("bash", filepath.Join(dir, "interop-gpu.sh"), "plan")
	cmd.Env = withoutEnv(os.Environ(), "BUDGET", "PARTS", "PROCS", "QUICK", "CUPY_PROCS")
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	plan = string(out)
	require.NotContains(t, plan, "SKIPPED", "the default plan leaves a part out:\n%s", plan)
	for _, part := range []string{"shim.txt", "streams.jsonl", "server.jsonl", "hooks.jsonl", "both.txt", "torch.jsonl", "pair.jsonl",
		"pyalloc.jsonl", "cupy.jsonl", "cublas_test.txt", "sanitizer.txt"} {
		require.Contains(t, plan, part, "the default plan runs every part")
	}
	for _, onto := range []string{"side", "default"} {
		for _, mode := range []string{"wired", "unwired"} {
			require.Contains(t, plan, "interop_streams.py "+mode+" --onto "+onto, "record_stream onto each stream, with its control")
		}
	}
	require.Equal(t, 9, strings.Count(plan, "interop_torch.py "+"native")+strings.Count(plan, "interop_torch.py expandable")+
		strings.Count(plan, "interop_torch.py gpuscope --steps 60"), "three rounds of PyTorch's three modes:\n%s", plan)
	m := regexp.MustCompile(`(?m)^budget (\d+) s, .*\n(?s:.*)^about (\d+) s of (\d+), (\d+) s for what follows a part's limit`).FindStringSubmatch(plan)
	require.NotNil(t, m, "the plan's first and last lines:\n%s", plan)
	budget, _ := strconv.Atoi(m[1])
	spent, _ := strconv.Atoi(m[2])
	after, _ := strconv.Atoi(m[4])
	require.LessOrEqual(t, spent, budget)
	require.LessOrEqual(t, budget+after, 600, "the budget and what may follow it fit the device's command")
}

// withoutEnv returns env without the variables named.
func withoutEnv(env []string, names ...string) []string {
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(names, name) {
			out = append(out, kv)
		}
	}
	return out
}

// TestTheInteropHarnessRefusesALogdirThatHoldsFiles runs interop-gpu.sh
// into the LOGDIR of a run before it, as on a device kept warm between
// calls: it refuses and runs nothing. The report read the earlier run's
// lines beside its own.
func TestTheInteropHarnessRefusesALogdirThatHoldsFiles(t *testing.T) {
	tmp := t.TempDir()
	ran := filepath.Join(tmp, "ran")
	bin := interopBin(t, "#!/bin/sh\ntouch "+ran+"\n")
	logs := filepath.Join(tmp, "logs")
	cmd := exec.Command("bash", filepath.Join("..", "..", "scripts", "measure", "interop-gpu.sh"), "run", logs, filepath.Join(tmp, "out"))
	cmd.Env = append(withoutEnv(os.Environ(), "QUICK", "PROCS"), "INTEROP_BIN="+bin, "PARTS=cublas", "BUDGET=8")
	requireLogdirRefused(t, cmd, logs)
	require.NoFileExists(t, ran, "a part ran")
}

// interopBin writes, in a new folder, what interop-gpu.sh build writes, for
// a run of the part cublas alone: cublas is that script, libgpuscope.so
// empty.
func interopBin(t *testing.T, cublas string) string {
	t.Helper()
	bin := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bin, "libgpuscope.so"), nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "commit.txt"), []byte("test\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "cublas"), []byte(cublas), 0o755))
	return bin
}

// TestTheInteropHarnessKeepsWhatAHungPartLeft runs interop-gpu.sh's batch
// with one part, a program that hangs and ignores SIGTERM: the part is
// killed 10 s after its limit, listed as failed, and the logs and the
// report are in OUT, where a device run's command returns them.
func TestTheInteropHarnessKeepsWhatAHungPartLeft(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 on this machine: the harness's report needs one")
	}
	tmp := t.TempDir()
	pidFile := filepath.Join(tmp, "hung.pid")
	bin := interopBin(t, "#!/bin/bash\ntrap '' TERM\necho $$ > "+pidFile+"\necho started\nexec sleep 300\n")
	t.Cleanup(func() { // where the test fails before the harness killed it
		if pid, err := os.ReadFile(pidFile); err == nil {
			_ = exec.Command("kill", "-KILL", strings.TrimSpace(string(pid))).Run()
		}
	})

	logs, out := filepath.Join(tmp, "logs"), filepath.Join(tmp, "out")
	cmd := exec.Command("bash", filepath.Join("..", "..", "scripts", "measure", "interop-gpu.sh"), "run", logs, out)
	cmd.Env = append(withoutEnv(os.Environ(), "QUICK", "PROCS"), "INTEROP_BIN="+bin, "PARTS=cublas", "BUDGET=8")
	output, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", output)
	require.Equal(t, 1, exit.ExitCode(), "the verdict's status, FAIL:\n%s", output)

	commands, err := os.ReadFile(filepath.Join(logs, "commands.txt"))
	require.NoError(t, err)
	require.Regexp(t, `== cublas\.txt \[rc 137, `, string(commands), "killed after its limit:\n%s", commands)
	failures, err := os.ReadFile(filepath.Join(logs, "failures.txt"))
	require.NoError(t, err)
	require.Contains(t, string(failures), "cublas.txt: exited 137")
	pid, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	// The KILL is delivered, and the process reaped, a moment after the
	// harness goes on.
	require.Eventually(t, func() bool {
		return exec.Command("kill", "-0", strings.TrimSpace(string(pid))).Run() != nil
	}, 20*time.Second, 50*time.Millisecond, "the hung program is gone")

	report, err := os.ReadFile(filepath.Join(out, "report.txt"))
	require.NoError(t, err)
	require.Contains(t, string(report), "Parts that failed:")
	require.Regexp(t, `(?m)^VERDICT: FAIL: .*parts failed`, string(report))
	list := run(t, "", "tar", "tzf", filepath.Join(out, "interop-logs.tgz"))
	for _, f := range []string{"logs/commands.txt", "logs/cublas.txt", "logs/failures.txt", "logs/report.txt", "logs/machine.txt"} {
		require.Contains(t, list, f)
	}
}
