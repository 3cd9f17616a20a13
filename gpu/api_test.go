package gpu_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/apitest"
)

// TestTheAPIIsWhatUsersCall holds the package's exported names to this
// list: a name added to the package is added here too, deliberately.
func TestTheAPIIsWhatUsersCall(t *testing.T) {
	apitest.Check(t, ".", []string{
		"const CUDA",
		"const DefaultHostMemory",
		"const DiscardContents",
		"const KeepContents",
		"func Alloc",
		"func AllocHost",
		"func Devices",
		"func Evictable",
		"func HostMemory",
		"func Limit",
		"func MaxReserved",
		"func MaxReservedFraction",
		"func Name",
		"func OnOutOfMemory",
		"func OnReleaseError",
		"func OnStream",
		"func Open",
		"func OpenDefault",
		"func OpenDriver",
		"func OpenHost",
		"func PoolOptions",
		"func RecordStacks",
		"func Reserve",
		"func ScrubFreed",
		"func Sleepable",
		"func WaitForMemory",
		"func WithScope",
		"func Zeroed",
		"method Buffer.CopyFrom",
		"method Buffer.CopyFromHost",
		"method Buffer.CopyToHost",
		"method Buffer.Device",
		"method Buffer.IsView",
		"method Buffer.IsZero",
		"method Buffer.Memset",
		"method Buffer.Ptr",
		"method Buffer.RecordUse",
		"method Buffer.Size",
		"method Buffer.Use",
		"method Buffer.View",
		"method Bytes.String",
		"method Device.Close",
		"method Device.Driver",
		"method Device.EmptyCache",
		"method Device.MaxReserved",
		"method Device.MemInfo",
		"method Device.Name",
		"method Device.NewScope",
		"method Device.ResetPeaks",
		"method Device.SetMaxReserved",
		"method Device.SetMaxReservedFraction",
		"method Device.Snapshot",
		"method Device.StartRecording",
		"method Device.Stats",
		"method Device.String",
		"method Device.Summary",
		"method Device.WriteProfile",
		"method Event.Done",
		"method Event.Release",
		"method Event.Wait",
		"method Function.Launch",
		"method HostSlice.Free",
		"method HostSlice.IsZero",
		"method HostSlice.Len",
		"method HostSlice.Use",
		"method Module.Function",
		"method OOMError.Error",
		"method OOMError.Unwrap",
		"method Recording.Stop",
		"method Scope.Alloc",
		"method Scope.Close",
		"method Scope.Context",
		"method Scope.Device",
		"method Scope.Free",
		"method Scope.Keep",
		"method Scope.LoadModule",
		"method Scope.NewStream",
		"method Scope.UseStream",
		"method Scope.Path",
		"method Scope.Sleep",
		"method Scope.Stats",
		"method Scope.Wake",
		"method ScopeStats.String",
		"method Slice.CopyFromHost",
		"method Slice.CopyFromHostAsync",
		"method Slice.CopyToHost",
		"method Slice.CopyToHostAsync",
		"method Slice.Len",
		"method Slice.UseHost",
		"method Slice.View",
		"method Stats.LogValue",
		"method Stats.String",
		"method Stream.ID",
		"method Stream.Record",
		"method Stream.Synchronize",
		"type Buffer",
		"type Contents",
		"type BufferSnapshot",
		"type Bytes",
		"type Device",
		"type DeviceInfo",
		"type DeviceOption",
		"type Dim",
		"type Elem",
		"type Event",
		"type Function",
		"type Holder",
		"type HostSlice",
		"type LimitError",
		"type Module",
		"type OOMError",
		"type PoolSnapshot",
		"type Recording",
		"type ResourceSnapshot",
		"type Scope",
		"type ScopeOption",
		"type ScopeSnapshot",
		"type ScopeStats",
		"type Site",
		"type Slice",
		"type Snapshot",
		"type Stats",
		"type Stream",
		"var ErrAsleep",
		"var ErrDeviceClosed",
		"var ErrEvicted",
		"var ErrFreed",
		"var ErrInvalidSize",
		"var ErrNoDevice",
		"var ErrNotKept",
		"var ErrNotSupported",
		"var ErrOutOfMemory",
		"var ErrScopeClosed",
		"var ErrWrongScope",
	})
}

// TestImportingGPULinksNoHTTP: a program that imports gpu links no HTTP or
// TLS stack, in either build; the profile handler is gpu/gpuhttp's.
func TestImportingGPULinksNoHTTP(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("needs the go command, to list gpu's dependencies")
	}
	deps := func(t *testing.T, pkg string, tags ...string) []string {
		args := append([]string{"list", "-deps"}, tags...)
		out, err := exec.Command(goTool, append(args, pkg)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return strings.Fields(string(out))
	}
	for _, tags := range [][]string{nil, {"-tags", "cuda"}} {
		t.Run("gpu "+strings.Join(tags, " ")+" has no net/http among its dependencies", func(t *testing.T) {
			got := deps(t, ".", tags...)
			require.Contains(t, got, "github.com/gpuscope/gpuscope/pool", "the list is gpu's dependencies")
			// Not net itself: the cuda build has it through gorgonia.org/cu's uuid.
			for _, heavy := range []string{"net/http", "crypto/tls"} {
				assert.False(t, slices.Contains(got, heavy), "gpu depends on %s", heavy)
			}
		})
	}
	t.Run("the check sees net/http where it is: in gpu/gpuhttp", func(t *testing.T) {
		assert.Contains(t, deps(t, "./gpuhttp"), "net/http")
	})
}
