package main

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/examples/internal/demotest"
)

func TestMain(m *testing.M) { demotest.Main(m) }

func TestTheCachePlateausAndTheLeakGrows(t *testing.T) {
	s := demotest.Output(t, run)
	assert.Contains(t, s, "leaking loop, bytes its scope holds after each step: warm-up 1.00 MiB, 2.00 MiB, 3.00 MiB, 4.00 MiB; measured 5.00 MiB, 6.00 MiB, 7.00 MiB, 8.00 MiB, 9.00 MiB, 10.00 MiB, 11.00 MiB, 12.00 MiB\n")
	assert.Contains(t, s, "leaking loop: a leak, it grows at every measured step: gputest.Steady fails: memory held by buffers grew in 8 of 8 iterations after 4 warm-ups")
	assert.Contains(t, s, "caching loop, bytes its scope holds after each step: warm-up 1.00 MiB, 2.00 MiB, 3.00 MiB, 4.00 MiB; measured 4.00 MiB, 4.00 MiB, 4.00 MiB, 4.00 MiB, 4.00 MiB, 4.00 MiB, 4.00 MiB, 4.00 MiB\n")
	assert.Contains(t, s, "caching loop: a cache, it stops growing: gputest.Steady passes\n")
}

// TestTheFiguresAddUp: each loop runs once, so Steady's first growth is the
// step after the warm-up in the printed series, and what the device holds
// at the end is the leak's 12 steps and the cache's 4 slots.
func TestTheFiguresAddUp(t *testing.T) {
	s := demotest.Output(t, run)
	assert.Contains(t, s, "(the first: iteration 0: +1.00 MiB (to 5.00 MiB))")
	assert.Regexp(t, `after both loops:\s+allocated 16.00 MiB`, s)
	assert.Contains(t, s, "allocated at the end: the leak's 12 results (12.00 MiB) and the cache's 4 (4.00 MiB), 16.00 MiB in all\n")
	assert.Regexp(t, `in all\s+24 allocations \(24.00 MiB\), 8 frees \(8.00 MiB\)`, s)
	assert.Regexp(t, `\n  leak\s+12.00 MiB\s+peak\s+12.00 MiB\s+12 buffers`, s)
	// The cache makes room before it computes: it never holds a fifth.
	assert.Regexp(t, `\n  cache\s+4.00 MiB\s+peak\s+4.00 MiB\s+4 buffers`, s)
}

// The Summary's "served from the cache" beside "cached 0 B" is explained,
// with the Summary's own figures: one counts allocations since the device
// opened, the other is free memory now.
func TestServedFromTheCacheBesideNothingCachedIsExplained(t *testing.T) {
	s := demotest.Output(t, run)
	summary := regexp.MustCompile(`in all\s+(\d+) allocations .*, (\d+) served from the cache`).FindStringSubmatch(s)
	require.NotNil(t, summary, s)
	allocs, served := summary[1], summary[2]
	cached := regexp.MustCompile(`\n  cached\s+(\S+ \S*B)\s`).FindStringSubmatch(s)
	require.NotNil(t, cached, s)
	assert.Contains(t, s, served+" served from the cache beside cached "+cached[1]+": served counts allocations since the device opened, cached is free memory now.\n")
	n, _ := strconv.Atoi(allocs)
	m, _ := strconv.Atoi(served)
	assert.Contains(t, s, fmt.Sprintf("%d of the %d allocations found free memory the pool held (a result the cache had freed, or room left in memory reserved for an earlier one) and made no driver call; the other %d made the pool reserve more.\n", m, n, n-m))
	assert.Regexp(t, `\nNow 16.00 MiB of the \S+ \S+ reserved is in live results, so `+regexp.QuoteMeta(cached[1])+` is cached.\n`, s)
}
