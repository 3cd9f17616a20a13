package driver_test

import (
	"testing"

	"github.com/gpuscope/gpuscope/internal/apitest"
)

// TestTheAPIIsWhatUsersCall holds the package's exported names to this
// list: a name added to the package is added here too, deliberately.
func TestTheAPIIsWhatUsersCall(t *testing.T) {
	apitest.Check(t, ".", []string{
		"method NoStreamError.Error",
		"method NoStreamError.StreamGone",
		"method OutOfMemoryError.Error",
		"method OutOfMemoryError.OutOfMemory",
		"method OutOfMemoryError.Unwrap",
		"type Driver",
		"type HostAddressable",
		"type HostAllocator",
		"type KernelLauncher",
		"type NoStreamError",
		"type OutOfMemoryError",
		"type PageMapper",
		"type PeerCopier",
		"var ErrClosed",
	})
}
