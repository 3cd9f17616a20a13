//go:build linux

package host_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gpuscope/gpuscope/gpu/internal/host"
)

func TestACapacityBeyondTheMachineIsRefused(t *testing.T) {
	_, err := host.New(1 << 62)
	assert.ErrorContains(t, err, "exceeds this machine's")
}
