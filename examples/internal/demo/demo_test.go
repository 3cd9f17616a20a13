package demo

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(gputest.Wrap(m))
}

func TestOpenSaysWhichDeviceAndReportShowsItsMemory(t *testing.T) {
	var out bytes.Buffer
	dev, err := Open(&out, 64<<20)
	require.NoError(t, err)
	defer func() { require.NoError(t, dev.Close()) }()
	if !gpu.CUDA {
		assert.Contains(t, out.String(), "device: host:0 (host memory, 64.00 MiB) (no GPU: this build has no CUDA support; build with -tags cuda to run on GPU 0)")
	}
	out.Reset()
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(3 << 20)
		Report(&out, "inside", dev)
		return err
	}))
	Report(&out, "after", dev)
	assert.Regexp(t, `^inside:\s+allocated 3.00 MiB\s+peak 3.00 MiB\s+reserved \S+ \S+\nafter:\s+allocated 0 B\s+peak 3.00 MiB`, out.String())
}

func TestOnHostRunsOnTheHostDeviceAndClosesIt(t *testing.T) {
	var opened *gpu.Device
	errRun := errors.New("run failed")
	err := OnHost(io.Discard, 2<<20, func(w io.Writer, dev *gpu.Device) error {
		opened = dev
		assert.Contains(t, dev.String(), "host memory, 2.00 MiB")
		return gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			x, err := gpu.Alloc[int32](s, 3)
			require.NoError(t, err)
			require.NoError(t, x.CopyFromHost([]int32{7, 8, 9}))
			got, err := ToHost(x)
			require.NoError(t, err)
			assert.Equal(t, []int32{7, 8, 9}, got)
			return errRun
		})
	})
	assert.ErrorIs(t, err, errRun, "run's error comes back")
	require.NotNil(t, opened)
	assert.ErrorIs(t, gpu.WithScope(context.Background(), opened, func(*gpu.Scope) error { return nil }),
		gpu.ErrDeviceClosed, "the device is closed once OnHost returns")
}

func TestToHostSaysWhyItCannotCopy(t *testing.T) {
	_, err := ToHost(gpu.Slice[float32]{})
	assert.Error(t, err)
}
