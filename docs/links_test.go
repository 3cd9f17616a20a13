// Package docs_test checks that the documentation's links lead somewhere:
// every figure in README.md and docs/ links to the raw output it came from
// under docs/data, and a link that points nowhere would hide a figure
// whose file was lost.
package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// Nothing here starts goroutines or opens devices; goleak keeps it so.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// link matches a Markdown link or image target: ](target) or ](target "title").
var link = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

func TestEveryRelativeLinkLeadsToAFile(t *testing.T) {
	pages, err := filepath.Glob("*.md")
	require.NoError(t, err)
	pages = append(pages, filepath.Join("..", "README.md"))
	require.GreaterOrEqual(t, len(pages), 2, "README.md and the pages of docs/")
	checked := 0
	for _, page := range pages {
		text, err := os.ReadFile(page)
		require.NoError(t, err)
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if fragment, ok := strings.CutPrefix(target, "#"); ok {
				assert.Contains(t, anchors(string(text)), fragment, "%s links to %s: no such heading", page, target)
				continue
			}
			target, fragment, _ := strings.Cut(target, "#")
			path := filepath.Join(filepath.Dir(page), filepath.FromSlash(target))
			_, err := os.Stat(path)
			assert.NoError(t, err, "%s links to %s", page, m[1])
			checked++
			if err == nil && fragment != "" && strings.HasSuffix(target, ".md") {
				text, err := os.ReadFile(path)
				require.NoError(t, err)
				assert.Contains(t, anchors(string(text)), fragment, "%s links to %s: no such heading", page, m[1])
			}
		}
	}
	assert.Positive(t, checked, "the pages link to their data")
}

// anchors returns the fragments a Markdown page's headings answer to, as
// GitHub makes them: lower case, punctuation dropped, spaces as hyphens.
func anchors(page string) []string {
	var out []string
	inCode := false
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		heading, ok := strings.CutPrefix(line, "#")
		if inCode || !ok {
			continue
		}
		heading = strings.TrimSpace(strings.TrimLeft(heading, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(heading) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}

func TestAnchorsAreWhatGitHubMakesOfHeadings(t *testing.T) {
	page := "# Top\n\n## The pool, against PyTorch's allocator: on an H200\n```\n# not a heading\n```\n### What examples/train prints\n"
	assert.Equal(t, []string{"top", "the-pool-against-pytorchs-allocator-on-an-h200", "what-examplestrain-prints"}, anchors(page))
}
