//go:build !linux

package host

// physicalMemory cannot tell the machine's RAM here.
func physicalMemory() (int64, bool) { return 0, false }
