package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// library is libgpuscope.so, built once for the tests that need it, into
// a folder TestMain removes.
var library struct {
	once sync.Once
	dir  string
	out  string
	err  error
}

// buildLibrary builds libgpuscope.so, once, and returns its folder. (The
// race detector cannot run in a shared library that a C program loads:
// package internal/cthreads runs the same C program's calls under it.)
func buildLibrary(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the shared library's tests run on Linux")
	}
	library.once.Do(func() {
		if library.dir, library.err = os.MkdirTemp("", "libgpuscope"); library.err != nil {
			return
		}
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", filepath.Join(library.dir, "libgpuscope.so"), ".")
		var out []byte
		out, library.err = cmd.CombinedOutput()
		library.out = string(out)
	})
	require.NoError(t, library.err, "%s", library.out)
	return library.dir
}

// buildC compiles testdata/name.c against the library in dir and returns
// the program's path.
func buildC(t *testing.T, dir, name string) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), name)
	src, err := filepath.Abs(filepath.Join("testdata", name+".c"))
	require.NoError(t, err)
	run(t, "", "gcc", "-O2", "-Wall", "-Werror", "-pthread", "-I.", src, "-o", exe,
		"-L"+dir, "-lgpuscope", "-Wl,-rpath,"+dir)
	return exe
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Run(), "%s %s:\n%s", name, strings.Join(args, " "), out.String())
	return out.String()
}

// TestCThreads runs testdata/cthreads.c against the shared library: the
// entry points called from threads Go did not make, good calls and bad.
func TestCThreads(t *testing.T) {
	dir := buildLibrary(t)
	exe := buildC(t, dir, "cthreads")
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "GPUSCOPE_HOST_MEMORY=268435456")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "ok\n")
}

// TestExportsMatchTheHeader checks that the library exports exactly the
// gpuscope_ functions gpuscope.h declares.
func TestExportsMatchTheHeader(t *testing.T) {
	dir := buildLibrary(t)
	header, err := os.ReadFile("gpuscope.h")
	require.NoError(t, err)
	var declared []string
	for _, m := range regexp.MustCompile(`\b(gpuscope_\w+)\(`).FindAllStringSubmatch(string(header), -1) {
		declared = append(declared, m[1])
	}
	var exported []string
	for _, line := range strings.Split(run(t, "", "nm", "-D", "--defined-only", filepath.Join(dir, "libgpuscope.so")), "\n") {
		if f := strings.Fields(line); len(f) == 3 && strings.HasPrefix(f[2], "gpuscope_") {
			exported = append(exported, f[2])
		}
	}
	slices.Sort(declared)
	slices.Sort(exported)
	require.NotEmpty(t, declared)
	require.Equal(t, declared, exported)
}

// TestPairBenchRuns builds testdata/pair_bench.c, the pair timed from C,
// and runs it briefly, so that the measurement's program keeps working.
func TestPairBenchRuns(t *testing.T) {
	dir := buildLibrary(t)
	exe := buildC(t, dir, "pair_bench")
	out := run(t, "", exe, "1000", "4096", "0", "2")
	require.Contains(t, out, "alloc+free pair")
	require.Contains(t, out, "sizes alternating")
}
