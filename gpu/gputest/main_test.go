package gputest_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(gputest.Wrap(m))
}

// fakeT records what a check reports.
type fakeT struct{ errs []string }

func (f *fakeT) Error(args ...any) { f.errs = append(f.errs, fmt.Sprint(args...)) }

func (f *fakeT) Helper() {}

func openHost(t *testing.T) *gpu.Device {
	t.Helper()
	dev, err := gpu.OpenHost()
	require.NoError(t, err)
	t.Cleanup(func() { _ = dev.Close() })
	return dev
}

func fast() gputest.Option { return gputest.MaxSleep(1) }

var inFlight = make(chan struct{})

type fakeM struct {
	code int
	run  func()
}

func (m fakeM) Run() int {
	if m.run != nil {
		m.run()
	}
	return m.code
}
