package hosttest_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/internal/hosttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFaultInjection(t *testing.T) {
	d, err := hosttest.New(1 << 20)
	require.NoError(t, err)
	defer d.Close()
	d.FailNth(hosttest.OpAlloc, 2)
	a, err := d.Alloc(64)
	require.NoError(t, err)
	_, err = d.Alloc(64)
	assert.ErrorIs(t, err, hosttest.ErrInjected, "the second allocation fails")
	b, err := d.Alloc(64)
	require.NoError(t, err, "and only that one")
	d.FailWhen(func(op hosttest.Op, size int64) bool { return op == hosttest.OpCopy && size == 3 })
	assert.ErrorIs(t, d.CopyHtoD(a, []byte{1, 2, 3}, 0), hosttest.ErrInjected)
	assert.NoError(t, d.CopyHtoD(a, []byte{1, 2}, 0))
	d.FailWhen(nil)
	d.FailNth(hosttest.OpFree, 1)
	assert.ErrorIs(t, d.Free(a, 64), hosttest.ErrInjected)
	require.NoError(t, d.Free(a, 64), "an injected failure loses nothing")
	require.NoError(t, d.Free(b, 64))
	assert.False(t, errors.Is(err, driver.ErrClosed))
}
