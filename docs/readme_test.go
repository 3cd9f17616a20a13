package docs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// The README is read first and whole: at most 120 lines, and a table's
// header names its columns, with no links in it (the data is linked once,
// below the table).
func TestTheReadmeIsShortAndItsTablesPlain(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimRight(string(readme), "\n"), "\n")
	assert.LessOrEqual(t, len(lines), 120, "README.md's lines")
	for i, l := range lines {
		if i+1 < len(lines) && strings.HasPrefix(l, "|") && strings.HasPrefix(lines[i+1], "|---") {
			assert.NotContains(t, l, "](", "line %d, a table's header, links", i+1)
		}
	}
}

// The GPU table says which commit it measured, and that is the commit
// its data folder's README names.
func TestTheReadmesGPUTableNamesTheCommitItsDataMeasured(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	at := strings.Index(string(readme), "## Against PyTorch's allocator, on an ")
	require.GreaterOrEqual(t, at, 0, "the README has the section")
	section, _, _ := strings.Cut(string(readme)[at:], "\n## ")
	commit := regexp.MustCompile(`commit ([0-9a-f]{7,})`).FindStringSubmatch(section)
	require.NotNil(t, commit, "the section names its commit")
	data := regexp.MustCompile(`\]\((docs/data/[^)]+)\)`).FindStringSubmatch(section)
	require.NotNil(t, data, "the section links its data")
	dataReadme, err := os.ReadFile(filepath.Join("..", data[1], "README.md"))
	require.NoError(t, err)
	assert.Contains(t, string(dataReadme), "Commit "+commit[1], "%s's README", data[1])
}

// scripts/measure/readme-times.sh, which times the README's two commands
// on a fresh clone with empty caches, runs: QUICK=1 has it time two
// commands of a second, which print the caches they ran with.
func TestTheReadmeTimesScriptRuns(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join(root, ".git")); err != nil {
		t.Skip("not a git checkout: the script clones one")
	}
	out := filepath.Join(t.TempDir(), "readme")
	cmd := exec.Command(filepath.Join(root, "scripts", "measure", "readme-times.sh"), "HEAD", out)
	cmd.Env = append(os.Environ(), "QUICK=1")
	msg, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", msg)

	times, err := os.ReadFile(filepath.Join(out, "times.txt"))
	require.NoError(t, err)
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	require.NoError(t, err)
	assert.Contains(t, string(times), "commit "+strings.TrimSpace(string(head)))
	assert.Regexp(t, `(?s)# go version\nbefore: .*load average.*\n[0-9.]+ s real, [0-9.]+ s user, [0-9.]+ s sys\nexit status 0\nafter: `, string(times))
	assert.Equal(t, 2, strings.Count(string(times), "exit status 0"))

	caches, err := os.ReadFile(filepath.Join(out, "test.txt"))
	require.NoError(t, err)
	for _, dir := range strings.Fields(string(caches)) {
		assert.NotContains(t, []string{os.Getenv("GOCACHE"), os.Getenv("GOMODCACHE")}, dir, "caches of its own")
		assert.NoDirExists(t, dir, "removed after the run")
	}
	readme, err := os.ReadFile(filepath.Join(out, "README.md"))
	require.NoError(t, err)
	assert.Contains(t, string(readme), "scripts/measure/readme-times.sh HEAD "+out)
	assert.FileExists(t, filepath.Join(out, "quickstart.txt"))
}
