package foreign

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTableAgreesWithAMap puts and removes random addresses, many in one
// probe run, and checks every lookup against a map.
func TestTableAgreesWithAMap(t *testing.T) {
	var s shard
	want := map[uintptr]bool{}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		// Few distinct addresses, so that puts and removes meet often.
		ptr := uintptr(1+rng.IntN(3000)) << 8
		h := hash(ptr)
		switch i := s.find(ptr, h); {
		case rng.IntN(2) == 0:
			s.put(entry{ptr: ptr}, h)
			want[ptr] = true
		case i >= 0:
			s.remove(i)
			delete(want, ptr)
		default:
			require.False(t, want[ptr], "%#x put but not found", ptr)
		}
	}
	require.Equal(t, len(want), s.n)
	for ptr := range want {
		require.GreaterOrEqual(t, s.find(ptr, hash(ptr)), 0, "%#x lost", ptr)
	}
	n := 0
	for _, e := range s.entries {
		if e.ptr != 0 {
			n++
			require.True(t, want[e.ptr], "%#x removed but still there", e.ptr)
		}
	}
	require.Equal(t, len(want), n)

	// Emptied in a random order, shrinking as it goes, it finds the rest.
	left := make([]uintptr, 0, len(want))
	for ptr := range want {
		left = append(left, ptr)
	}
	rng.Shuffle(len(left), func(i, j int) { left[i], left[j] = left[j], left[i] })
	for k, ptr := range left {
		s.remove(s.find(ptr, hash(ptr)))
		s.shrink()
		if k%97 == 0 {
			for _, p := range left[k+1:] {
				require.GreaterOrEqual(t, s.find(p, hash(p)), 0, "%#x lost as the shard shrank", p)
			}
		}
	}
	require.Zero(t, s.n)
	require.Len(t, s.entries, minShard)
}

func TestTableEachRemovesWhatItIsAskedTo(t *testing.T) {
	var tb table
	for i := range 5000 {
		ptr := uintptr(i+1) << 8
		h := hash(ptr)
		tb.shardOf(h).put(entry{ptr: ptr}, h)
	}
	seen := map[uintptr]int{}
	tb.each(func(e *entry) bool {
		seen[e.ptr]++
		return e.ptr>>8%3 == 0
	})
	left := 0
	tb.each(func(e *entry) bool {
		require.NotZero(t, e.ptr>>8%3, "%#x was to be removed", e.ptr)
		left++
		return false
	})
	require.Len(t, seen, 5000)
	require.Equal(t, 5000-5000/3, left)
}

// Addresses of large blocks are multiples of 2 MiB, and of small ones
// of 512 bytes: both spread over the shards and their places, so that
// probe runs stay short.
func TestAlignedAddressesSpread(t *testing.T) {
	for _, align := range []uintptr{512, 2 << 20} {
		var tb table
		const n = 20000
		base := uintptr(0x7f0000000000)
		for i := range n {
			ptr := base + uintptr(i)*align
			h := hash(ptr)
			tb.shardOf(h).put(entry{ptr: ptr}, h)
		}
		probes, most := 0, 0
		for i := range n {
			ptr := base + uintptr(i)*align
			h := hash(ptr)
			s := tb.shardOf(h)
			mask := uint64(len(s.entries) - 1)
			k := s.find(ptr, h)
			require.GreaterOrEqual(t, k, 0)
			d := int((uint64(k) - h) & mask) // places past its home
			probes += d
			most = max(most, s.n)
		}
		require.Less(t, float64(probes)/n, 2.0, "mean probe run for addresses %d bytes apart", align)
		require.Less(t, most, 3*n/tableShards, "the fullest shard for addresses %d bytes apart", align)
	}
}

// places returns how many places the table's shards have.
func places() int {
	n := 0
	for k := range tbl.shards {
		s := &tbl.shards[k]
		s.mu.Lock()
		n += len(s.entries)
		s.mu.Unlock()
	}
	return n
}

// The table grows with the live allocations and shrinks once they are
// freed, by a free or by a scope's end: a burst of live allocations left
// it large for good, and every scope's end reads it whole.
func TestTheTableShrinksOnceItsAllocationsAreFreed(t *testing.T) {
	hostDevice(t)
	const n = 20000
	for _, how := range []string{"freed", "ended"} {
		id, err := Begin(0, 0, "burst")
		require.NoError(t, err)
		p := make([]uintptr, n)
		for k := range p {
			p[k], err = Alloc(0, id, 512, 0)
			require.NoError(t, err)
		}
		require.GreaterOrEqual(t, places(), 2*n, "the table holds every allocation")
		if how == "freed" {
			for _, q := range p {
				require.NoError(t, Free(0, q, 512, 0))
			}
		}
		require.NoError(t, End(id, true))
		require.LessOrEqual(t, places(), tableShards*minShard, "%s: the table stayed large", how)
	}
}
