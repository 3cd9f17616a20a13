//go:build !linux

package host

// Page mapping is emulated on Linux only; elsewhere the pool allocates
// whole segments.

type vmState struct{}

func newVM() vmState { return vmState{} }

func (d *Driver) resolveMapped(uintptr, int64) ([]byte, bool, error) { return nil, false, nil }

func (d *Driver) closeVM() error { return nil }
