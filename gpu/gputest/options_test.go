package gputest_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
)

func TestOptionsThatMakeNoSenseAreErrors(t *testing.T) {
	assert.Error(t, gputest.Find(gputest.Cleanup(func(int) {})))
	assert.Error(t, gputest.Find(gputest.IgnoreScope("")))
	assert.Error(t, gputest.Find(gputest.Devices()))
	assert.Error(t, gputest.Find(gputest.MaxSleep(0)))
	ft := &fakeT{}
	gputest.VerifyNone(ft, nil)
	assert.Len(t, ft.errs, 1)
}

// Two host devices have names of their own: Devices checks one of them by
// its name, or every host device by "host".
func TestDevicesTellsTwoHostDevicesApart(t *testing.T) {
	leaky, clean := openHost(t), openHost(t)
	s, err := leaky.NewScope(gpu.Name("forgotten"))
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Alloc(4096)
	require.NoError(t, err)
	assert.NoError(t, gputest.Find(fast(), gputest.Devices(clean.Name())))
	err = gputest.Find(fast(), gputest.Devices(leaky.Name()))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `[Scope "forgotten" open on device `+leaky.Name()+`,`)
	_, err = s.Alloc(4096) // something new to report: a leak is reported once
	require.NoError(t, err)
	assert.Error(t, gputest.Find(fast(), gputest.Devices("host")), "every host device")
}
