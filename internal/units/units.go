// Package units writes quantities for people to read. It is shared by the
// pool, the drivers and the tools, which must not import one another for it.
package units

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
)

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

// WithBytes writes n as a count of bytes with its size in the largest unit
// beside it, "398458880 bytes (380.00 MiB)": the exact figure for scripts
// and the readable one for people. Under 1 KiB it is the count alone.
func WithBytes(n int64) string {
	if n < 1024 && n > -1024 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%d bytes (%s)", n, FormatBytes(n))
}

// Precise writes n as FormatBytes does where that reads back as n
// ("2.00 MiB"), and as WithBytes does where it rounds ("2097153 bytes
// (2.00 MiB)"): for a figure a reader compares with others, such as a
// cap, which a rounded figure would hide.
func Precise(n int64) string {
	if back, err := ParseBytes(FormatBytes(n)); err == nil && back == n {
		return FormatBytes(n)
	}
	return WithBytes(n)
}

// binaryUnits are the units ParseBytes and ExactBytes know, powers of 1024;
// decimalUnits are the powers of 1000 ParseBytes also takes.
var (
	binaryUnits  = []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	decimalUnits = []string{"kB", "MB", "GB", "TB", "PB", "EB"}
)

// maxSizeText bounds what ParseBytes reads, so that a hostile string
// costs nothing to refuse.
const maxSizeText = 40

// ErrSize is the error of a string ParseBytes cannot read as a size.
var ErrSize = errors.New("units: not a size in bytes")

// ParseBytes reads a size in bytes: a non-negative integer ("4096"), or a
// number with a unit, binary ("1.5GiB", "2 MiB") or decimal ("80GB"), of
// any case; "B" alone means bytes. The size must be a whole number of
// bytes that fits an int64. Anything else, a sign, an exponent, NaN or
// Inf included, is ErrSize.
func ParseBytes(s string) (int64, error) {
	if len(s) > maxSizeText {
		return 0, fmt.Errorf("%w: longer than %d characters", ErrSize, maxSizeText)
	}
	num, unit := splitNumber(strings.TrimSpace(s))
	mult, ok := unitSize(strings.TrimSpace(unit))
	if num == "" || !ok || strings.Count(num, ".") > 1 || strings.HasPrefix(num, ".") || strings.HasSuffix(num, ".") {
		return 0, fmt.Errorf("%w: %q", ErrSize, s)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("%w: %q", ErrSize, s)
	}
	r.Mul(r, new(big.Rat).SetInt(mult))
	if !r.IsInt() {
		return 0, fmt.Errorf("%w: %q is not a whole number of bytes", ErrSize, s)
	}
	if !r.Num().IsInt64() {
		return 0, fmt.Errorf("%w: %q is more than %d bytes", ErrSize, s, int64(math.MaxInt64))
	}
	return r.Num().Int64(), nil
}

// splitNumber splits s after its leading digits and dots.
func splitNumber(s string) (num, rest string) {
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		return s, ""
	}
	return s[:i], s[i:]
}

// unitSize returns the bytes in one of unit ("": bytes).
func unitSize(unit string) (*big.Int, bool) {
	if unit == "" || strings.EqualFold(unit, "B") {
		return big.NewInt(1), true
	}
	for i := range binaryUnits {
		if strings.EqualFold(unit, binaryUnits[i]) {
			return new(big.Int).Lsh(big.NewInt(1), uint(10*(i+1))), true
		}
		if strings.EqualFold(unit, decimalUnits[i]) {
			return new(big.Int).Exp(big.NewInt(1000), big.NewInt(int64(i+1)), nil), true
		}
	}
	return nil, false
}

// ExactBytes writes n in the largest binary unit that divides it exactly,
// as ParseBytes reads it back: "2MiB", "1TiB", "1000".
func ExactBytes(n int64) string {
	if n == 0 {
		return "0"
	}
	for i := len(binaryUnits) - 1; i >= 0; i-- {
		if u := int64(1) << (10 * (i + 1)); n%u == 0 {
			return fmt.Sprintf("%d%s", n/u, binaryUnits[i])
		}
	}
	return fmt.Sprint(n)
}

// Count writes n and the noun, singular for one and plural otherwise:
// "1 buffer", "3 buffers". The plural is the noun with an s, or plural
// where it is given ("children").
func Count[N ~int | ~int64](n N, noun string, plural ...string) string {
	if n == 1 || n == -1 {
		return fmt.Sprintf("%d %s", n, noun)
	}
	if len(plural) > 0 {
		return fmt.Sprintf("%d %s", n, plural[0])
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
