package docs_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The design pages say how the thing works and why, and the record of runs
// lives in measurements.md: each stays short enough to read (issue 36).
func TestTheDesignPagesStayShort(t *testing.T) {
	for _, page := range []string{"pool.md", "benchmarks.md"} {
		b, err := os.ReadFile(page)
		require.NoError(t, err)
		assert.LessOrEqual(t, strings.Count(string(b), "\n"), 300, "%s: 300 lines at most", page)
	}
}
