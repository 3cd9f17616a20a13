package foreign

import (
	"bytes"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

// fakePairs stands for clib's pair cache: a block the library frees into it
// stays a live allocation here until the cache hands it back.
type fakePairs struct {
	mu     sync.Mutex
	isOn   bool
	blocks []fakeBlock // oldest first
	// pause, where set, runs once in Take after the blocks left the cache
	// and before Take returns: the window a test replays.
	pause func()
	// ending, where set, runs once in End, as a scope's end has begun and
	// before it settles what the table holds.
	ending func()
}

type fakeBlock struct {
	Block
	scope, size int64
}

func (f *fakePairs) Set(_ int, on bool, out *[PairCacheOut]Block) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.isOn = on
	if on {
		return 0
	}
	return f.takeLocked(out)
}

func (f *fakePairs) Reset(int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.isOn, f.blocks = false, nil
}

func (f *fakePairs) Begin(int, int64, bool) {}

func (f *fakePairs) End(_ int, scope, _ int64, _ bool, out *[PairCacheOut]Block) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ending := f.ending; ending != nil {
		f.ending = nil
		ending()
	}
	n, kept := 0, f.blocks[:0]
	for _, b := range f.blocks {
		if b.scope == scope {
			out[n] = b.Block
			n++
		} else {
			kept = append(kept, b)
		}
	}
	f.blocks = kept
	return n
}

func (f *fakePairs) Take(_ int, out *[PairCacheOut]Block) int {
	f.mu.Lock()
	n := f.takeLocked(out)
	pause := f.pause
	f.pause = nil
	f.mu.Unlock()
	if pause != nil {
		pause()
	}
	return n
}

func (f *fakePairs) takeLocked(out *[PairCacheOut]Block) int {
	for k, b := range f.blocks {
		out[k] = b.Block
	}
	n := len(f.blocks)
	f.blocks = nil
	return n
}

func (f *fakePairs) Counts(int) (int64, int64) { return 0, 0 }

// free is the library's free of a, allocated in scope, as the C side
// makes it: into the cache where it is on, else through Free.
func (f *fakePairs) free(t *testing.T, a Block, scope int64) {
	f.mu.Lock()
	on := f.isOn
	if on {
		f.blocks = append(f.blocks, fakeBlock{a, scope, f.sizeOf(a)})
	}
	f.mu.Unlock()
	if !on {
		require.NoError(t, Free(0, a.Ptr, -1, 0))
	}
}

// sizeOf returns the size a was allocated with.
func (f *fakePairs) sizeOf(a Block) int64 {
	h := hash(a.Ptr)
	s := tbl.shardOf(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.entries[s.find(a.Ptr, h)].buf.Size()
}

func (f *fakePairs) on() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.isOn
}

// holds reports whether the cache holds a.
func (f *fakePairs) holds(a Block) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range f.blocks {
		if b.ID == a.ID {
			return true
		}
	}
	return false
}

// pauseTake has the next Take stop once it took the cache's blocks, until
// the function it returns is called; paused is closed when it stops.
func (f *fakePairs) pauseTake() (paused <-chan struct{}, resume func()) {
	stopped, resumed := make(chan struct{}), make(chan struct{})
	f.mu.Lock()
	f.pause = func() { close(stopped); <-resumed }
	f.mu.Unlock()
	return stopped, func() { close(resumed) }
}

func withFakePairs(t *testing.T) *fakePairs {
	f := &fakePairs{}
	old := pairCache.Load()
	SetPairCache(f)
	t.Cleanup(func() { pairCache.Store(old) })
	return f
}

// allocated allocates size bytes in scope on device 0 as a miss of the
// pair cache's does, where the cache may hold blocks.
func allocated(t *testing.T, scope, size int64) Block {
	t.Helper()
	a, err := alloc(0, scope, size, 0, -1)
	require.NoError(t, err)
	return a
}

// What a library freed into the pair cache is no allocation of the
// device's to anyone who reads it from Go: not to Snapshot (what gputest
// reads), not to Stats, and not to an allocation that needs its room.
func TestWhatThePairCacheHoldsIsFreeToGo(t *testing.T) {
	f := withFakePairs(t)
	d := hostDevice(t) // 64 MiB
	f.free(t, allocated(t, 0, 4096), 0)
	snap, err := d.gpu.Snapshot()
	require.NoError(t, err)
	for _, s := range snap.Scopes {
		assert.Empty(t, s.Buffers, "scope %q: the library freed everything it had", s.Path)
	}
	assert.Zero(t, d.gpu.Stats().ActiveBlocks)

	f.free(t, allocated(t, 0, 48<<20), 0)
	err = gpu.WithScope(t.Context(), d.gpu, func(s *gpu.Scope) error {
		_, err := s.Alloc(48 << 20)
		return err
	})
	require.NoError(t, err, "the cache gave back the 48 MiB the library freed")
	assert.Zero(t, d.gpu.Stats().OOMs, "a retry after the cache gave back served it")
}

// While the device records, the pair cache is off, so that the recording
// sees every allocation: a scope begun meanwhile does not turn it on, and
// the recording's Stop does.
func TestThePairCacheIsOffWhileTheDeviceRecords(t *testing.T) {
	f := withFakePairs(t)
	d := hostDevice(t)
	require.True(t, f.on())
	f.free(t, allocated(t, 0, 4096), 0)

	var recorded bytes.Buffer
	rec, err := d.gpu.StartRecording(&recorded)
	require.NoError(t, err)
	assert.False(t, f.on(), "off while recording")
	assert.Zero(t, d.gpu.Stats().ActiveBlocks, "what it held went back")
	id, err := Begin(0, 0, "torch")
	require.NoError(t, err)
	assert.False(t, f.on(), "a scope begun while recording leaves it off")
	require.NoError(t, rec.Stop())
	assert.True(t, f.on(), "on again after the recording")
	require.NoError(t, End(id, false))
	assert.True(t, f.on())
}

func activeBlocks(t *testing.T) int64 {
	var st struct {
		ActiveBlocks int64 `json:"active_blocks"`
	}
	require.NoError(t, json.Unmarshal(Stats(0, 0), &st))
	return st.ActiveBlocks
}

// A scope's end has the cache hand back that scope's blocks, which are
// freed (the library freed them), and leaves the others': a scope's end
// reports only what the library still holds, and a scope begun serves no
// block of the enclosing scope's.
func TestAScopesEndTakesItsBlocksOutOfThePairCache(t *testing.T) {
	f := withFakePairs(t)
	d := hostDevice(t)
	require.NoError(t, Free(0, allocated(t, 0, 1<<20).Ptr, -1, 0)) // a peak that what follows stays under
	r := allocated(t, 0, 4096)
	f.free(t, r, 0)
	id, err := Begin(0, 0, "torch")
	require.NoError(t, err)
	q := allocated(t, id, 64<<10) // of a size r is too small to serve
	f.free(t, q, id)
	assert.True(t, f.holds(r), "a scope begun takes nothing out of the cache")

	require.NoError(t, End(id, false))
	assert.False(t, f.holds(q), "torch's block left the cache with torch")
	assert.True(t, f.holds(r))
	assert.Contains(t, string(Stats(0, 0)), "ended with no buffer live", "the cached block was passed on, not freed")
	assert.EqualValues(t, 0, d.gpu.Stats().ActiveBlocks)
}

// A block on a library's stream is its scope's: the scope's end takes it
// out of the cache.
func TestABlockOnAStreamLeavesThePairCacheWithItsScope(t *testing.T) {
	f := withFakePairs(t)
	d := hostDevice(t)
	st, err := d.root.scope.NewStream()
	require.NoError(t, err)
	id, err := Begin(0, 0, "torch")
	require.NoError(t, err)
	a, err := alloc(0, id, 4096, st.ID(), -1)
	require.NoError(t, err)
	f.free(t, a, id)
	require.NoError(t, End(id, false))
	assert.False(t, f.holds(a), "the stream's block left with its scope")
	assert.Zero(t, activeBlocks(t))
}

// What the cache holds is freed before the figures are read through C,
// and before an allocation of a library's that finds the pool short fails.
func TestWhatThePairCacheHoldsIsFreedWhenItMatters(t *testing.T) {
	f := withFakePairs(t)
	hostDevice(t)
	require.NoError(t, SetMaxReserved(0, 8<<20))
	f.free(t, allocated(t, 0, 6<<20), 0)
	q, err := Alloc(0, 0, 7<<20, 0)
	require.NoError(t, err, "the cached 6 MiB kept 7 MiB from fitting under an 8 MiB cap")
	require.NoError(t, Free(0, q, -1, 0))

	f.free(t, allocated(t, 0, 4096), 0)
	assert.Zero(t, activeBlocks(t))

	// AllocAfter frees what the cache evicted, then allocates.
	p := allocated(t, 0, 4096)
	a, err := AllocAfter([]Block{p}, 0, 0, 0, 8192, 0)
	require.NoError(t, err)
	require.NoError(t, Free(0, a.Ptr, -1, 0))
	assert.Zero(t, activeBlocks(t))
}

// A recording's Stop and a scope's End that frees what the library left
// run at once without waiting on each other: End holds the device's lock
// while its frees reach the recording, and Stop gives the pair cache back,
// which takes that lock; Stop did so under the recording's own lock.
func TestARecordingStopsWhileAScopeEnds(t *testing.T) {
	d := hostDevice(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 3000 {
			var recorded bytes.Buffer
			rec, err := d.gpu.StartRecording(&recorded)
			if !assert.NoError(t, err) {
				return
			}
			id, err := Begin(0, 0, "torch")
			if !assert.NoError(t, err) {
				return
			}
			for range 64 {
				_, err := Alloc(0, id, 4096, 0)
				if !assert.NoError(t, err) {
					return
				}
			}
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); assert.NoError(t, End(id, true)) }()
			go func() { defer wg.Done(); assert.NoError(t, rec.Stop()) }()
			wg.Wait()
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute): // a deadlock, not a slow machine: 3000 rounds take a few seconds
		t.Fatal("Stop and End wait on each other")
	}
}

func (f *fakePairs) List(_ int, out *[PairCacheOut]Cached) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, b := range f.blocks {
		out[k] = Cached{Block: b.Block, Scope: b.scope, Size: b.size}
	}
	return len(f.blocks)
}

func (f *fakePairs) Evict(_ int, ptr uintptr) (Block, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, b := range f.blocks {
		if b.Ptr == ptr {
			f.blocks = append(f.blocks[:k], f.blocks[k+1:]...)
			return b.Block, true
		}
	}
	return Block{}, false
}
