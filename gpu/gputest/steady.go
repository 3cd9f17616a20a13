package gputest

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/internal/registry"
	"github.com/gpuscope/gpuscope/internal/units"
)

// Steady calls fn warmup times, then iterations times, and fails t if the
// bytes held by live buffers, in every open scope of every open device,
// grow from one iteration to the next: memory that keeps growing over time
// is a leak, also when it grows inside a scope's reservation or in a parent
// that Keeps it. The failure shows the growth per iteration and the scopes
// that grew, with where their new buffers were allocated where stacks are
// recorded. An error from fn fails t and stops the loop.
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
	allocated := []int64{total(before)}
	for i := range iterations {
		if err := fn(); err != nil {
			t.Error(fmt.Sprintf("gputest: Steady: iteration %d: %v", i, err))
			return
		}
		allocated = append(allocated, total(scopeBytes()))
	}
	var grew []string
	for i := 1; i < len(allocated); i++ {
		if allocated[i] > allocated[i-1] {
			grew = append(grew, fmt.Sprintf("iteration %d: +%s (to %s)", i-1,
				gpu.Bytes(allocated[i]-allocated[i-1]), gpu.Bytes(allocated[i])))
		}
	}
	if len(grew) == 0 {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "gputest: memory held by buffers grew in %d of %d iterations after %s:\n  %s\n",
		len(grew), iterations, units.Count(warmup, "warm-up"), strings.Join(grew, "\n  "))
	after := scopeBytes()
	for _, at := range slices.SortedFunc(maps.Keys(after), scopeAt.compare) {
		if n := after[at]; n > before[at] {
			// The form of VerifyNone's reports: one name for a scope everywhere.
			fmt.Fprintf(&b, "Scope %q on device %s grew by %s\n", at.path, at.device, gpu.Bytes(n-before[at]))
		}
	}
	t.Error(b.String())
}

// scopeAt names an open scope: its device and its path there.
type scopeAt struct{ device, path string }

func (a scopeAt) compare(b scopeAt) int {
	return cmp.Or(strings.Compare(a.device, b.device), strings.Compare(a.path, b.path))
}

func total(m map[scopeAt]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// scopeBytes maps each open scope to the bytes of the buffers it owns
// itself.
func scopeBytes() map[scopeAt]int64 {
	m := map[scopeAt]int64{}
	for _, dev := range registry.Devices[*gpu.Snapshot]() {
		for _, s := range dev.Snapshot.Scopes {
			for _, b := range s.Buffers {
				m[scopeAt{s.Device, s.Path}] += b.Size
			}
		}
	}
	return m
}
