package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gpuscope/gpuscope/examples/internal/demotest"
)

func TestMain(m *testing.M) { demotest.Main(m) }

func TestTheCachePlateausAndTheLeakGrows(t *testing.T) {
	s := demotest.Output(t, run)
	assert.Contains(t, s, "caching loop, held after each step: 1.00 MiB, 2.00 MiB, 3.00 MiB, 4.00 MiB, 4.00 MiB, 4.00 MiB, 4.00 MiB, 4.00 MiB, 4.00 MiB, 4.00 MiB, 4.00 MiB, 4.00 MiB\n")
	assert.Contains(t, s, "caching loop: plateau (a cache): gputest.Steady passes")
	assert.Contains(t, s, "leaking loop, held after each step: 1.00 MiB, 2.00 MiB, 3.00 MiB, 4.00 MiB, 5.00 MiB, 6.00 MiB, 7.00 MiB, 8.00 MiB, 9.00 MiB, 10.00 MiB, 11.00 MiB, 12.00 MiB\n")
	assert.Contains(t, s, "leaking loop: grows at every step (a leak): memory held by buffers grew in 8 of 8 iterations after 4 warm-ups")
	assert.Regexp(t, `after both loops:\s+allocated 28.00 MiB`, s)
	// Steady ran each loop 12 more times: the cache still holds 4, the leak 24.
	assert.Regexp(t, `\n  leak\s+24.00 MiB .* 24 buffers`, s)
	assert.Regexp(t, `\n  cache\s+4.00 MiB .* 4 buffers`, s)
}
