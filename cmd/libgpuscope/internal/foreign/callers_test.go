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
