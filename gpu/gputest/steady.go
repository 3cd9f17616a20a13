package gputest

import (
	"fmt"
	"strings"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/pool"
)

// Steady calls fn warmup times, then iterations times, and fails t if the
// bytes allocated across all open devices grow from one iteration to the
// next: memory that keeps growing over time is a leak. The failure shows
// the growth per iteration and the scopes that grew. An error from fn
// fails t and stops the loop.
func Steady(t TestingT, warmup, iterations int, fn func() error) {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	if warmup < 0 || iterations < 2 || fn == nil {
		t.Error(fmt.Sprintf("gputest: Steady(warmup %d, iterations %d): need warmup >= 0, iterations >= 2 and a function", warmup, iterations))
		return
	}
	for i := range warmup {
		if err := fn(); err != nil {
			t.Error(fmt.Sprintf("gputest: Steady: warm-up %d: %v", i, err))
			return
		}
	}
	before := scopeBytes()
	allocated := []int64{allocatedNow()}
	for i := range iterations {
		if err := fn(); err != nil {
			t.Error(fmt.Sprintf("gputest: Steady: iteration %d: %v", i, err))
			return
		}
		allocated = append(allocated, allocatedNow())
	}
	var grew []string
	for i := 1; i < len(allocated); i++ {
		if allocated[i] > allocated[i-1] {
			grew = append(grew, fmt.Sprintf("iteration %d: +%s (to %s)", i-1,
				pool.FormatBytes(allocated[i]-allocated[i-1]), pool.FormatBytes(allocated[i])))
		}
	}
	if len(grew) == 0 {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "gputest: allocated memory grew in %d of %d iterations after %d warm-ups:\n  %s\n",
		len(grew), iterations, warmup, strings.Join(grew, "\n  "))
	after := scopeBytes()
	for path, n := range after {
		if n > before[path] {
			fmt.Fprintf(&b, "scope %q grew by %s\n", path, pool.FormatBytes(n-before[path]))
		}
	}
	t.Error(b.String())
}

func allocatedNow() int64 {
	var n int64
	for _, d := range gpu.OpenDevices() {
		n += d.Stats().Allocated
	}
	return n
}

// scopeBytes maps device/path to the bytes live in each open scope.
func scopeBytes() map[string]int64 {
	m := map[string]int64{}
	for _, d := range gpu.OpenDevices() {
		for _, s := range d.OpenScopes() {
			m[s.Device+":"+s.Path] = s.Live
		}
	}
	return m
}
