package extcache_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/internal/extcache"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A device asks the cache attached to it, and only that one, until it is
// detached; a device with none is told there was nothing to give back.
func TestADeviceAsksTheCacheAttachedToIt(t *testing.T) {
	type device struct{ int }
	a, b := &device{1}, &device{2}
	var flushed int
	var held []bool
	extcache.Attach(a, &extcache.Cache{
		Flush: func() bool { flushed++; return true },
		Hold:  func(on bool) { held = append(held, on) },
	})
	assert.True(t, extcache.Flush(a))
	assert.False(t, extcache.Flush(b), "b has no cache")
	extcache.Hold(a, true)
	extcache.Hold(b, true)
	extcache.Hold(a, false)
	assert.Equal(t, 1, flushed)
	assert.Equal(t, []bool{true, false}, held)

	extcache.Detach(a)
	assert.False(t, extcache.Flush(a), "detached")
	assert.Equal(t, 1, flushed)
}
