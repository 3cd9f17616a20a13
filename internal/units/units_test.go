package units_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/internal/units"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFormatBytesPicksTheLargestUnitAtOrAboveOne(t *testing.T) {
	for n, want := range map[int64]string{
		0:        "0 B",
		1023:     "1023 B",
		-1023:    "-1023 B",
		1024:     "1.00 KiB",
		3 << 19:  "1.50 MiB",
		40 << 30: "40.00 GiB",
		-2 << 40: "-2.00 TiB",
		1 << 62:  "4096.00 PiB",
	} {
		assert.Equal(t, want, units.FormatBytes(n), "%d bytes", n)
	}
}
