package gputest_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

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
