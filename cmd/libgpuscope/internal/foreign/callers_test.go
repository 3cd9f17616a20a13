package foreign

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

// An allocation from C past the cap advises the call a C caller can make,
// in the root scope and in one begun from C; a binding that renames the
// call (gpuscope.py) reads its own name.
func TestAnOOMFromCAdvisesTheCallersCall(t *testing.T) {
	hostDevice(t)
	t.Cleanup(func() { require.NoError(t, NameCall(SetMaxReservedCall, "")) })
	require.NoError(t, SetMaxReserved(0, 4<<20))
	_, err := Alloc(0, 0, 8<<20, 0)
	require.ErrorIs(t, err, gpu.ErrOutOfMemory)
	assert.Contains(t, err.Error(), "raise it with gpuscope_set_max_reserved;")
	assert.NotContains(t, err.Error(), "Device.SetMaxReserved")
	assert.NotContains(t, err.Error(), "option at Open", "the library opens its devices")

	id, err := Begin(0, 0, "step")
	require.NoError(t, err)
	require.NoError(t, NameCall(SetMaxReservedCall, "gpuscope.set_max_reserved"))
	_, err = Alloc(0, id, 8<<20, 0)
	assert.Contains(t, err.Error(), `in scope "libgpuscope/step"`)
	assert.Contains(t, err.Error(), "raise it with gpuscope.set_max_reserved;")
	require.NoError(t, End(id, false))

	assert.ErrorContains(t, NameCall("gpuscope_alloc", "x"), `"gpuscope_alloc": no call the library's messages advise; they advise gpuscope_set_max_reserved`)
}

// An allocation from C that finds the device full advises neither a Limit,
// which C's scopes do not have, nor Go's EmptyCache: the cached memory is
// given back with gpuscope_empty_cache, or the name a binding gave it.
func TestAFullDeviceFromCAdvisesCsCalls(t *testing.T) {
	hostDevice(t) // 64 MiB
	t.Cleanup(func() { require.NoError(t, NameCall(EmptyCacheCall, "")) })
	var live []uintptr
	for range 100 {
		ptr, err := Alloc(0, 0, 300<<10, 0)
		require.NoError(t, err)
		live = append(live, ptr)
	}
	for i, ptr := range live {
		if i%2 == 0 { // a cache the pool cannot give back: pages half in use
			require.NoError(t, Free(0, ptr, 300<<10, 0))
		}
	}
	_, err := Alloc(0, 0, 40<<20, 0)
	require.ErrorIs(t, err, gpu.ErrOutOfMemory)
	assert.Contains(t, err.Error(), "to fit, free buffers early, or use smaller batches;")
	assert.NotContains(t, err.Error(), "Limit")
	assert.Contains(t, err.Error(), "is cached (free, kept by the pool for reuse; gpuscope_empty_cache returns it to the driver)")

	require.NoError(t, NameCall(EmptyCacheCall, "gpuscope.empty_cache"))
	_, err = Alloc(0, 0, 40<<20, 0)
	assert.Contains(t, err.Error(), "; gpuscope.empty_cache returns it to the driver)")
	for i, ptr := range live {
		if i%2 == 1 {
			require.NoError(t, Free(0, ptr, 300<<10, 0))
		}
	}
}
