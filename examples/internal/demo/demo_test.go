package demo

import (
	"bytes"
	"context"
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

func TestOpenedSaysWhichDeviceAndReportShowsItsMemory(t *testing.T) {
	var out bytes.Buffer
	dev, err := gpu.OpenDefault(gpu.HostMemory(64 << 20))
	require.NoError(t, err)
	defer func() { require.NoError(t, dev.Close()) }()
	Opened(&out, dev)
	if gpu.CUDA {
		assert.Equal(t, "device: "+dev.String()+"\n", out.String())
	} else {
		assert.Regexp(t, `^device: host:\d+ \(host memory, 64.00 MiB\) \(no GPU: this build has no CUDA support; build with -tags cuda to run on GPU 0\)\n$`, out.String())
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

func TestToHostSaysWhyItCannotCopy(t *testing.T) {
	_, err := ToHost(gpu.Slice[float32]{})
	assert.Error(t, err)
}
