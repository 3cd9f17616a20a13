package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// from marks a Go block of a page whose lines are taken from a run
// example: <!-- from gpu/example_wait_test.go --> on the line before.
var from = regexp.MustCompile("<!-- from (\\S+) -->\n```go\n((?s:.*?))```")

// excerptsMissing returns the lines of page's marked blocks that the
// named file does not hold (each compared without its indentation); a
// line "..." stands for what the excerpt leaves out.
func excerptsMissing(root, page string) (blocks int, missing []string, err error) {
	text, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		return 0, nil, err
	}
	for _, m := range from.FindAllStringSubmatch(string(text), -1) {
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(m[1])))
		if err != nil {
			return 0, nil, err
		}
		have := map[string]bool{}
		for _, l := range strings.Split(string(src), "\n") {
			have[strings.TrimSpace(l)] = true
		}
		blocks++
		for _, l := range strings.Split(m[2], "\n") {
			if l = strings.TrimSpace(l); l != "" && l != "..." && !have[l] {
				missing = append(missing, m[1]+": "+l)
			}
		}
	}
	return blocks, missing, nil
}

// The guide's snippets of Evictable and WaitForMemory are excerpts of
// gpu's Example functions, which go test compiles and runs: a snippet
// cannot show code the API does not take.
func TestTheGuidesSnippetsAreTakenFromRunExamples(t *testing.T) {
	blocks, missing, err := excerptsMissing("..", "docs/guide.md")
	require.NoError(t, err)
	assert.GreaterOrEqual(t, blocks, 2, "the Evictable and WaitForMemory snippets are marked")
	assert.Empty(t, missing, "lines of guide.md's snippets that their example does not hold")
}

// interop.md's snippet of the context form is an excerpt of capi's
// ExampleFor, which go test compiles and runs.
func TestTheInteropSnippetIsTakenFromARunExample(t *testing.T) {
	blocks, missing, err := excerptsMissing("..", "docs/interop.md")
	require.NoError(t, err)
	assert.GreaterOrEqual(t, blocks, 1, "the capi.For snippet is marked")
	assert.Empty(t, missing, "lines of interop.md's snippet that its example does not hold")
}

func TestTheExcerptCheckFindsALineTheExampleDoesNotHold(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "ex.go"), []byte("\tx := f(1)\n\treturn x\n"), 0o644))
	page := "<!-- from ex.go -->\n```go\nx := f(1)\n...\nreturn y\n```\n"
	require.NoError(t, os.WriteFile(filepath.Join(root, "page.md"), []byte(page), 0o644))
	blocks, missing, err := excerptsMissing(root, "page.md")
	require.NoError(t, err)
	assert.Equal(t, 1, blocks)
	assert.Equal(t, []string{"ex.go: return y"}, missing)
}
