// The host device maps pages on Linux only, and a Sleepable scope needs
// them (GPUs run Linux too).

//go:build linux

package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gpuscope/gpuscope/examples/internal/demotest"
)

func TestMain(m *testing.M) { demotest.Main(m) }

func TestATrainerAndAServerTakeTurnsOnADeviceThatHoldsOne(t *testing.T) {
	s := demotest.Output(t, run)
	for _, line := range []string{
		"trainer 32.00 MiB (weights and optimizer state kept asleep, gradients dropped), server 32.00 MiB (dropped asleep), device 48.00 MiB: not both at once\n",
		"turn 1, trainer:   allocated 32.00 MiB  asleep 0 B        (scopes asleep: 0)\n",
		"  the trainer asleep refuses its buffers: true\n",
		"turn 1, server:    allocated 32.00 MiB  asleep 32.00 MiB  (scopes asleep: 2)\n",
		"  served with weights of version 1\n",
		// The server asleep holds nothing; woken beside the trainer it
		// would need more than the device has left, and fails whole.
		"turn 2, trainer:   allocated 32.00 MiB  asleep 32.00 MiB  (scopes asleep: 1)\n  the server cannot wake beside it: true\n",
		"  served with weights of version 3\n",
		// The trainer's weights came back each turn with what they held:
		// it checks the version it finds before each step.
		"the trainer's buffers kept their addresses across 2 wakes: true\n",
	} {
		assert.Contains(t, s, line)
	}
}
