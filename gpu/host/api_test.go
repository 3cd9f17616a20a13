package host_test

import (
	"runtime"
	"testing"

	"github.com/gpuscope/gpuscope/internal/apitest"
)

// TestTheAPIIsWhatUsersCall holds the package's exported names to this
// list: a name added to the package is added here too, deliberately. The
// page-mapping methods exist on Linux only.
func TestTheAPIIsWhatUsersCall(t *testing.T) {
	want := []string{
		"const PageSize",
		"const PoisonByte",
		"func New",
		"method Driver.Alloc",
		"method Driver.Close",
		"method Driver.CopyDtoD",
		"method Driver.CopyDtoH",
		"method Driver.CopyDtoHAsync",
		"method Driver.CopyHtoD",
		"method Driver.CopyHtoDAsync",
		"method Driver.DestroyEvent",
		"method Driver.DestroyStream",
		"method Driver.EventDone",
		"method Driver.Free",
		"method Driver.HostAlloc",
		"method Driver.HostBytes",
		"method Driver.HostFree",
		"method Driver.MemInfo",
		"method Driver.Memset",
		"method Driver.Name",
		"method Driver.NewStream",
		"method Driver.RecordEvent",
		"method Driver.Synchronize",
		"method Driver.WaitEvent",
		"type Driver",
	}
	if runtime.GOOS == "linux" {
		want = append(want, "method Driver.Create", "method Driver.Granularity", "method Driver.Map", "method Driver.Release",
			"method Driver.ReleaseAddress", "method Driver.ReserveAddress", "method Driver.SetAccess", "method Driver.Unmap")
	}
	apitest.Check(t, ".", want)
}
