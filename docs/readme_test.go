package docs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The README's first Go block is the body of gpu's Example_readme, which
// `go test` runs: the README cannot show code that does not compile or
// does not do what it says.
func TestTheReadmeSnippetIsARunExample(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	_, block, ok := strings.Cut(string(readme), "```go\n")
	require.True(t, ok, "README.md has a Go block")
	block, _, ok = strings.Cut(block, "```")
	require.True(t, ok)

	src, err := os.ReadFile(filepath.Join("..", "gpu", "example_readme_test.go"))
	require.NoError(t, err)
	_, body, ok := strings.Cut(string(src), "// README begin\n")
	require.True(t, ok, "the example marks where the README's code begins")
	body, _, ok = strings.Cut(body, "\t\t// README end\n")
	require.True(t, ok)
	var lines []string
	for _, l := range strings.SplitAfter(body, "\n") {
		lines = append(lines, strings.TrimPrefix(l, "\t\t"))
	}
	assert.Equal(t, strings.Join(lines, ""), block)
}

// The README says how to use the library from another module, with the
// module path and Go version that go.mod declares.
func TestTheReadmeSaysHowToDependOnTheModule(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	mod, err := os.ReadFile(filepath.Join("..", "go.mod"))
	require.NoError(t, err)
	var path, version string
	for _, l := range strings.Split(string(mod), "\n") {
		if p, ok := strings.CutPrefix(l, "module "); ok {
			path = strings.TrimSpace(p)
		}
		if v, ok := strings.CutPrefix(l, "go "); ok {
			parts := strings.SplitN(strings.TrimSpace(v), ".", 3)
			version = parts[0] + "." + parts[1]
		}
	}
	require.NotEmpty(t, path)
	assert.Contains(t, string(readme), "go get "+path+"@latest")
	assert.Contains(t, string(readme), "`"+path+"/gpu`", "the import path")
	assert.Contains(t, string(readme), "Go "+version)
	assert.Contains(t, string(readme), "-tags cuda")
}
