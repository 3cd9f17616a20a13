package capi_test

import (
	"testing"

	"github.com/gpuscope/gpuscope/internal/apitest"
)

// TestTheAPIIsWhatUsersCall holds the package's exported names to this
// list: a name added to the package is added here too, deliberately.
func TestTheAPIIsWhatUsersCall(t *testing.T) {
	apitest.Check(t, ".", []string{
		"func For",
		"type Allocator",
	})
}
