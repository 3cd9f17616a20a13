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
var library built

// built is a library built once, on first use.
type built struct {
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
	return library.build(t, nil)
}

// build builds the library with the go build flags given, once, into a
// folder of its own, and returns the folder.
func (b *built) build(t *testing.T, env []string, flags ...string) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the shared library's tests run on Linux")
	}
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "libgpuscope"); b.err != nil {
			return
		}
		args := append([]string{"build", "-buildmode=c-shared"}, flags...)
		cmd := exec.Command("go", append(args, "-o", filepath.Join(b.dir, "libgpuscope.so"), ".")...)
		cmd.Env = append(os.Environ(), env...)
		var out []byte
		out, b.err = cmd.CombinedOutput()
		b.out = string(out)
	})
	require.NoError(t, b.err, "%s", b.out)
	return b.dir
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

// runC builds testdata/name.c against the shared library and runs it on a
// host device of 256 MiB; it must print "ok". It returns its output.
func runC(t *testing.T, name string) string {
	t.Helper()
	cmd := exec.Command(buildC(t, buildLibrary(t), name))
	cmd.Env = append(os.Environ(), "GPUSCOPE_HOST_MEMORY=268435456")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "ok\n")
	return string(out)
}

// TestCThreads runs testdata/cthreads.c against the shared library: the
// entry points called from threads Go did not make, good calls and bad.
func TestCThreads(t *testing.T) { runC(t, "cthreads") }

// TestForkedChildrenFailClearly runs testdata/forks.c: 40 children forked
// while threads allocate, each calling the library, which fails at once
// with a message in the child of a fork. Without the library's fork
// handler every child hung, in Go's runtime or on a lock a thread of the
// parent held at the fork.
func TestForkedChildrenFailClearly(t *testing.T) {
	require.Contains(t, runC(t, "forks"), "gpuscope_alloc: gpuscope cannot serve the child of a fork")
}

// TestExportsMatchTheHeader checks that the library exports exactly the
// functions gpuscope.h declares, and no other dynamic symbol: not cgo's
// and the Go runtime's, not package clib's crossings into Go, not
// gorgonia.org/cu's (a -tags cuda build). exports.so, the linker's version
// script, hides them.
func TestExportsMatchTheHeader(t *testing.T) {
	header, err := os.ReadFile("gpuscope.h")
	require.NoError(t, err)
	var declared []string
	for _, m := range regexp.MustCompile(`\b(gpuscope_\w+)\(`).FindAllStringSubmatch(string(header), -1) {
		declared = append(declared, m[1])
	}
	slices.Sort(declared)
	require.NotEmpty(t, declared)

	match := func(t *testing.T, exported []string) {
		if runtime.GOARCH == "arm64" { // no version script there (main.go)
			require.Subset(t, exported, declared)
			return
		}
		require.Equal(t, declared, exported)
	}
	t.Run("the host build exports the header's names and nothing else", func(t *testing.T) {
		match(t, exports(t, buildLibrary(t)))
	})
	t.Run("the cuda build exports the header's names and nothing else", func(t *testing.T) {
		env := cudaSDK(t)
		match(t, exports(t, cudaLibrary.build(t, env, "-tags", "cuda")))
	})
}

// cudaLibrary is libgpuscope.so built with -tags cuda, for
// TestExportsMatchTheHeader.
var cudaLibrary built

// exports returns the names of every symbol that the library in dir
// defines in its dynamic symbol table, functions and data, sorted.
func exports(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	for _, line := range strings.Split(run(t, "", "nm", "-D", "--defined-only", filepath.Join(dir, "libgpuscope.so")), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			names = append(names, f[2])
		}
	}
	slices.Sort(names)
	return names
}

// cudaSDK returns the environment that a -tags cuda build needs to find
// cuda.h and a libcuda.so to link against: none where CGO_CFLAGS names a
// folder with cuda.h (eval "$(scripts/cuda-sdk.sh)", as CI does), else
// the repository's .cuda-sdk that scripts/cuda-sdk.sh fetched, else the
// CUDA toolkit's /usr/local/cuda. It skips the test where none is here.
func cudaSDK(t *testing.T) []string {
	t.Helper()
	for _, f := range strings.Fields(os.Getenv("CGO_CFLAGS")) {
		if dir, ok := strings.CutPrefix(f, "-I"); ok && exists(filepath.Join(dir, "cuda.h")) {
			return nil
		}
	}
	for _, sdk := range []struct{ inc, lib string }{
		{filepath.Join("..", "..", ".cuda-sdk", "include"), filepath.Join("..", "..", ".cuda-sdk", "lib")},
		{"/usr/local/cuda/include", "/usr/local/cuda/lib64/stubs"},
	} {
		if exists(filepath.Join(sdk.inc, "cuda.h")) {
			inc, err := filepath.Abs(sdk.inc)
			require.NoError(t, err)
			lib, err := filepath.Abs(sdk.lib)
			require.NoError(t, err)
			return []string{"CGO_CFLAGS=-I" + inc, "CGO_LDFLAGS=-L" + lib}
		}
	}
	t.Skip(`no cuda.h here: eval "$(scripts/cuda-sdk.sh)" fetches it (CI does)`)
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
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
