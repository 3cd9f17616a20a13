//go:build linux

package host

import "golang.org/x/sys/unix"

// physicalMemory returns the machine's RAM in bytes, if it can tell.
func physicalMemory() (int64, bool) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0, false
	}
	return int64(si.Totalram) * int64(si.Unit), true
}
