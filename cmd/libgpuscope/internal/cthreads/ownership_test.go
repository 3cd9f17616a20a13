package cthreads_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/cmd/libgpuscope/internal/cthreads"
)

// onOneThread keeps the test on its OS thread: the entry points keep each
// thread's scopes.
func onOneThread(t *testing.T) {
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
}

// A scope begun inside a sleepable one lives in its memory: while that
// sleeps, a free of one of its buffers fails and so does an allocation in
// it, as they do in the sleepable scope itself (the buffer stays the
// scope's until it ends). The pair cache kept such a free and served the
// next allocation of its size from memory given back to the driver.
func TestThePairCacheKeepsNothingOfAScopeInsideASleepableOne(t *testing.T) {
	t.Setenv("GPUSCOPE_HOST_MEMORY", "268435456")
	onOneThread(t)
	s := cthreads.BeginSleepable("weights")
	require.Positive(t, s)
	inner := cthreads.BeginScope("inner")
	require.Positive(t, inner)
	const size = 1 << 20
	p := cthreads.TorchAlloc(size, 0)
	require.NotZero(t, p)
	require.True(t, cthreads.Sleep(s))

	n, _ := cthreads.Failures()
	cthreads.TorchFree(p, size, 0)
	after, last := cthreads.Failures()
	assert.Equal(t, n+1, after, "a free while asleep fails")
	assert.Contains(t, last, "gpuscope_free")
	assert.Zero(t, cthreads.TorchAlloc(size, 0), "an allocation in a scope asleep was served")

	done, _ := cthreads.Failures()
	assert.Equal(t, after+1, done, "the allocation asleep failed")

	require.True(t, cthreads.Wake(s))
	require.True(t, cthreads.EndScopeKeeping(inner)) // p, refused asleep, stays the scopes' until they end
	require.True(t, cthreads.EndScope(s))
}
