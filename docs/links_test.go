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
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			path := filepath.Join(filepath.Dir(page), filepath.FromSlash(target))
			_, err := os.Stat(path)
			assert.NoError(t, err, "%s links to %s", page, m[1])
			checked++
		}
	}
	assert.Positive(t, checked, "the pages link to their data")
}
