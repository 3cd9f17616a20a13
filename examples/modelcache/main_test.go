package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gpuscope/gpuscope/examples/internal/demotest"
)

func TestMain(m *testing.M) { demotest.Main(m) }

func TestSixModelsAreServedOnADeviceThatHoldsThree(t *testing.T) {
	s := demotest.Output(t, run)
	for _, line := range []string{
		// The priorities are printed before the first eviction needs them.
		"6 models of 20.00 MiB on a device of 64.00 MiB\npriorities: a 1, b 0, c 0, d 0, e 0, f 0; a full device evicts the idle model of the lowest priority, the least recently used among equals\n",
		"request  3: model c, load     sum 15728640\n",
		// The fourth model evicts the least recently used of priority 0;
		// "a", of priority 1, stays while any other can go.
		"request  4: model d, load     sum 20971520   (evicted b, priority 0)\n",
		"request  5: model a, hit      sum 5242880\n",
		"request  8: model b, reload   sum 10485760   (evicted e, priority 0)\n",
		"request  9: model a, hit      sum 5242880\n",
		"request 10: model c, reload   sum 15728640   (evicted f, priority 0)\n",
		"loads 8 (reloads 2), evictions 5 (100.00 MiB)\n",
	} {
		assert.Contains(t, s, line)
	}
}
