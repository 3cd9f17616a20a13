package housetest_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/housetest"
)

func TestThePublicSurfaceStaysSmall(t *testing.T) {
	got, err := housetest.PublicDeclarations(moduleRoot)
	require.NoError(t, err)
	require.Contains(t, got, "gpu", "the count sees the public packages")
	total := 0
	for _, n := range got {
		total += n
	}
	t.Logf("exported declarations by package: %v", got)
	assert.LessOrEqual(t, total, housetest.MaxPublicDeclarations,
		"the public packages export %d declarations: move what users never call under internal/", total)
}

func TestPublicDeclarationsCountsAsGoDocPrints(t *testing.T) {
	dir := t.TempDir()
	write := func(path, src string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
		require.NoError(t, os.WriteFile(path, []byte(src), 0o600))
	}
	// go doc -all prints: const (A, B) once, var V, func F, type T, its
	// constructor NewT and its method M, and G of the file that uses cgo:
	// 7 lines at column 0.
	write(filepath.Join(dir, "p", "p.go"), `package p

const (
	A = 1
	B = 2
)

var V, w = 1, 2

func F()    {}
func f()    {}
type T struct{}
func NewT() T { return T{} }
func (T) M()  {}
func (T) m()  {}
type u struct{}
func (u) N() {}
`)
	write(filepath.Join(dir, "p", "c.go"), "package p\n\n// #include <stdlib.h>\nimport \"C\"\n\nfunc G() {}\n")
	write(filepath.Join(dir, "p", "p_test.go"), "package p\n\nfunc Test() {}\n")
	write(filepath.Join(dir, "internal", "q", "q.go"), "package q\n\nfunc Q() {}\n")
	write(filepath.Join(dir, "cmd", "c", "c.go"), "package main\n\nfunc C() {}\n")
	write(filepath.Join(dir, "tests", "only_test.go"), "package tests\n")
	got, err := housetest.PublicDeclarations(dir)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"p": 7}, got, "internal/, cmd/ and tests aside")
}
