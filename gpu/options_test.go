package gpu_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/pool"
)

// A scope's name is one step of a path: one with "/" would read as a scope
// inside another (and gputest.IgnoreScope("x") would take "x/y" for a child
// of "x"), and an empty one names nothing.
func TestANameThatReadsAsAPathOrNothingIsRefused(t *testing.T) {
	dev := openHost(t)
	_, err := dev.NewScope(gpu.Name("x/y"))
	assert.EqualError(t, err, `gpu: Name("x/y"): a scope's name must not hold "/", which joins the names of a path ("request/decode"); `+
		`open the scope inside another to nest it, or write another character ("x-y")`)
	_, err = dev.NewScope(gpu.Name(""))
	assert.EqualError(t, err, `gpu: Name(""): a scope's name must not be empty; leave Name out for an unnamed scope`)
	assert.Zero(t, dev.Stats().OpenScopes, "no scope opened")
}

// An option given twice is refused: which would the device keep? Pool
// options count with the device's of the same name: gpu.MaxReserved is
// pool.MaxReserved.
func TestAnOptionGivenTwiceIsRefused(t *testing.T) {
	for name, c := range map[string]struct {
		opts []gpu.DeviceOption
		msg  string
	}{
		"MaxReserved twice": {[]gpu.DeviceOption{gpu.MaxReserved(8 << 20), gpu.MaxReserved(4 << 20)},
			"gpu: the cap (MaxReserved or MaxReservedFraction) given twice: give each option once"},
		"no cap, then a cap": {[]gpu.DeviceOption{gpu.MaxReserved(0), gpu.MaxReservedFraction(0.5)},
			"gpu: the cap (MaxReserved or MaxReservedFraction) given twice: give each option once"},
		"MaxReserved beside the pool's": {[]gpu.DeviceOption{gpu.MaxReserved(8 << 20), gpu.PoolOptions(pool.MaxReserved(4 << 20))},
			"gpu: MaxReserved(8388608), then MaxReserved(4194304): an option given twice; give it once"},
		"HostMemory twice": {[]gpu.DeviceOption{gpu.HostMemory(8 << 20), gpu.HostMemory(8 << 20)},
			"gpu: HostMemory given twice: give each option once"},
		"ScrubFreed twice": {[]gpu.DeviceOption{gpu.ScrubFreed(), gpu.ScrubFreed()},
			"gpu: ScrubFreed given twice: give each option once"},
		"OnOutOfMemory twice": {[]gpu.DeviceOption{gpu.OnOutOfMemory(func(error) {}), gpu.OnOutOfMemory(func(error) {})},
			"gpu: OnOutOfMemory given twice: give each option once"},
	} {
		_, err := gpu.OpenHost(c.opts...)
		assert.EqualError(t, err, c.msg, name)
	}
	dev := openHost(t, gpu.PoolOptions(pool.ReleaseThreshold(0)), gpu.PoolOptions(pool.Shards(1)))
	for name, opts := range map[string][]gpu.ScopeOption{
		"Name":          {gpu.Name("a"), gpu.Name("b")},
		"Limit":         {gpu.Limit(1 << 20), gpu.Reserve(4096), gpu.Limit(2 << 20)},
		"Reserve":       {gpu.Reserve(4096), gpu.Reserve(4096)},
		"Zeroed":        {gpu.Zeroed(), gpu.Zeroed()},
		"WaitForMemory": {gpu.WaitForMemory(), gpu.WaitForMemory()},
		"Evictable":     {gpu.Evictable(0), gpu.Evictable(1)},
		"Sleepable":     {gpu.Sleepable(), gpu.Sleepable()},
	} {
		_, err := dev.NewScope(opts...)
		assert.EqualError(t, err, "gpu: "+name+" given twice: give each option once")
	}
}
