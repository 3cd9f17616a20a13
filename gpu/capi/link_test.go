package capi_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Go program that imports gpu/capi links the context form and nothing of
// libgpuscope: none of its exported gpuscope_* entry points, which a
// library the program loads could otherwise bind to, none of the pair
// cache's C code, and none of the Go code that would put a cache in front
// of its devices.
func TestAProgramOfCapiLinksNoLibrary(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads an ELF symbol table with go tool nm")
	}
	exe := filepath.Join(t.TempDir(), "usecapi")
	out, err := exec.Command("go", "build", "-o", exe, "./testdata/usecapi").CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command("go", "tool", "nm", exe).CombinedOutput()
	require.NoError(t, err, "%s", out)
	syms := string(out)
	require.Contains(t, syms, "gpuscopeCtxAlloc", "the context form is linked")
	for _, line := range strings.Split(syms, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		name := f[len(f)-1]
		assert.False(t, strings.HasPrefix(name, "gpuscope_"), "libgpuscope's entry point %s", name)
		assert.False(t, strings.HasPrefix(name, "pc_"), "the C cache's %s", name)
		assert.NotContains(t, name, "cmd/libgpuscope", "the library's Go code: %s", name)
	}
}
