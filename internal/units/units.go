// Package units writes quantities for people to read. It is shared by the
// pool, the drivers and the tools, which must not import one another for it.
package units

import "fmt"

// FormatBytes writes n in the largest binary unit that keeps it at or above 1.
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	v, suffix := float64(n), ""
	for _, s := range []string{"KiB", "MiB", "GiB", "TiB", "PiB"} {
		v /= unit
		suffix = s
		if v < unit && v > -unit {
			break
		}
	}
	return fmt.Sprintf("%.2f %s", v, suffix)
}
