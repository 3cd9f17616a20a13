package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gpuscope/gpuscope/examples/internal/demotest"
)

func TestMain(m *testing.M) { demotest.Main(m) }

func TestTheProductIsComputedInScopeMemory(t *testing.T) {
	s := demotest.Output(t, run)
	// [1 2 3; 4 5 6] x [7 8; 9 10; 11 12] = [58 64; 139 154]
	assert.Contains(t, s, "in scope-owned memory: [58 64 139 154]\n")
	assert.Contains(t, s, "inside the scope: 1.50 KiB allocated", "three buffers, each rounded to 512 bytes")
	assert.Contains(t, s, "after the scope: 0 B allocated")
}
