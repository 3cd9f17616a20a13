package units_test

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

func TestWithBytesPutsTheUnitBesideTheCount(t *testing.T) {
	assert.Equal(t, "398458880 bytes (380.00 MiB)", units.WithBytes(398458880))
	assert.Equal(t, "512 bytes", units.WithBytes(512), "no unit where it says nothing more")
}

func TestParseBytesReadsCountsAndUnits(t *testing.T) {
	for s, want := range map[string]int64{
		"0":                   0,
		"4096":                4096,
		"2MiB":                2 << 20,
		"2 mib":               2 << 20,
		"1.5GiB":              3 << 29,
		"80GB":                80e9,
		"1kB":                 1000,
		"7B":                  7,
		"9223372036854775807": math.MaxInt64,
		"7EiB":                7 << 60,
	} {
		got, err := units.ParseBytes(s)
		require.NoError(t, err, s)
		assert.Equal(t, want, got, s)
	}
}

func TestParseBytesRefusesWhatIsNotASize(t *testing.T) {
	for _, s := range []string{"", "-5", "+5", "NaN", "Inf", "+Inf", "1e300", "2^62", "0x10", "1.5", "0.3KiB", ".5GiB", "5.GiB",
		"1.2.3MiB", "5 parsecs", "9223372036854775808", "8EiB", "1" + strings.Repeat("0", 100)} {
		_, err := units.ParseBytes(s)
		assert.ErrorIs(t, err, units.ErrSize, "%q", s)
	}
}

func TestExactBytesIsReadBackByParseBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 1000: "1000", 2 << 20: "2MiB", 1 << 40: "1TiB", 3 << 29: "1536MiB"} {
		assert.Equal(t, want, units.ExactBytes(n))
		back, err := units.ParseBytes(want)
		require.NoError(t, err)
		assert.Equal(t, n, back)
	}
}

func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"4096", "1.5GiB", "80 GB", "-1", "NaN"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := units.ParseBytes(s)
		if err != nil {
			require.ErrorIs(t, err, units.ErrSize)
			return
		}
		require.GreaterOrEqual(t, n, int64(0), "%q", s)
		back, err := units.ParseBytes(units.ExactBytes(n))
		require.NoError(t, err)
		require.Equal(t, n, back)
	})
}

func TestCountIsSingularForOneOnly(t *testing.T) {
	assert.Equal(t, "1 buffer", units.Count(1, "buffer"))
	assert.Equal(t, "0 buffers", units.Count(0, "buffer"))
	assert.Equal(t, "2 scopes", units.Count(int64(2), "scope"))
	assert.Equal(t, "1 child", units.Count(1, "child", "children"))
	assert.Equal(t, "3 children", units.Count(3, "child", "children"))
}

func TestPreciseRoundsOnlyWhatReadsBackExactly(t *testing.T) {
	assert.Equal(t, "2.00 MiB", units.Precise(2<<20))
	assert.Equal(t, "3.50 MiB", units.Precise(7<<19))
	assert.Equal(t, "1000 B", units.Precise(1000))
	assert.Equal(t, "2097151 bytes (2.00 MiB)", units.Precise(2<<20-1))
	assert.Equal(t, "2097153 bytes (2.00 MiB)", units.Precise(2<<20+1))
}
