package main

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostile are values no numeric flag can honour.
var hostile = []string{"", "NaN", "nan", "+Inf", "-Inf", "Inf", "1e300", "-1e300", "-5", "2^62", "4611686018427387904",
	"9223372036854775808", "99999999999999999999999", "0x10", "abc", "1.5.5", "12 parsecs"}

// Every numeric flag of every command refuses what it cannot honour, with
// an error that says what it accepts.
func TestEveryNumericFlagRefusesWhatItCannotHonour(t *testing.T) {
	checked := 0
	for _, cmd := range commands {
		fs := flagSet(cmd.name, cmd.make())
		fs.VisitAll(func(f *flag.Flag) {
			switch f.Value.(type) {
			case *byteFlag, *rangeFlag[int], *rangeFlag[float64]:
			default:
				return
			}
			checked++
			for _, v := range hostile {
				if v == "-5" && f.Name == "release-threshold" {
					continue // -1 means keep everything; -5 is refused below
				}
				code, out, errb := gpumem(t, nil, cmd.name, "--"+f.Name, v)
				if !assert.Equal(t, 1, code, "%s --%s %q", cmd.name, f.Name, v) {
					continue
				}
				assert.Empty(t, out)
				assert.Contains(t, errb, "for flag --"+f.Name+": want ", "%s --%s %q says what it accepts", cmd.name, f.Name, v)
			}
		})
	}
	assert.GreaterOrEqual(t, checked, 11, "the numeric flags of replay, plot and stress")
}

func TestMaxReservedSaysZeroIsAllowed(t *testing.T) {
	_, _, errb := gpumem(t, nil, "replay", "--max-reserved=-5", traceFile("mlp_train"))
	assert.Contains(t, errb, "want 0 (no cap) or a size up to 256TiB")
	assert.NotContains(t, errb, "must be positive")
	res := runReplay(t, "--max-reserved=0", traceFile("mlp_train"))
	assert.Zero(t, res.OOMs, "0 is no cap")
	res = runReplay(t, "--max-reserved=1GiB", traceFile("mlp_train"))
	assert.LessOrEqual(t, res.PeakReservedBytes, int64(1<<30), "a size with a unit")
}

func TestStressRefusesWhatItCannotHonour(t *testing.T) {
	code, _, errb := gpumem(t, nil, "stress", "--goroutines", "65")
	assert.Equal(t, 1, code)
	assert.Contains(t, errb, "want a whole number from 1 to 64", "more would run its device out of memory")
}

func TestStressRefusesTimesItCannotHonour(t *testing.T) {
	for _, v := range []string{"NaN", "+Inf", "1e300", "-1", "0", "1e-300", "86401"} {
		code, out, errb := gpumem(t, nil, "stress", "--seconds", v)
		assert.Equal(t, 1, code, v)
		assert.Empty(t, out, "%s: nothing was run", v)
		assert.Contains(t, errb, "want a number of seconds from 0.001 to 86400", v)
	}
	code, out, errb := gpumem(t, nil, "stress", "--seconds", "0.001")
	require.Zero(t, code, errb)
	var res stressResult
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	assert.GreaterOrEqual(t, res.Scopes, int64(16*4), "the shortest run still nests four scopes in each goroutine")
}

// A page of 2^62 bytes once overflowed the handles' sizing; pages of
// 8 GiB failed mid-trace. Pages are what a GPU has, or refused.
func TestAbsurdPagesAreRefused(t *testing.T) {
	for _, v := range []string{"4611686018427387904", "8GiB", "2GiB", "32KiB", "3MiB", "0"} {
		code, _, errb := gpumem(t, nil, "replay", "--page-size", v, traceFile("mlp_train"))
		assert.Equal(t, 1, code, v)
		assert.Contains(t, errb, "want a power of two from 64KiB to 1GiB", v)
	}
	res := runReplay(t, "--page-size", "1GiB", traceFile("mlp_train"))
	assert.Zero(t, res.OOMs, "the largest page works")
	assert.True(t, res.Expandable)
}

// --capacity 0 once meant a silent 1 TiB; there is no unlimited, and the
// default is said.
func TestCapacityZeroIsRefusedAndTheDefaultSaid(t *testing.T) {
	code, _, errb := gpumem(t, nil, "replay", "--capacity", "0", traceFile("mlp_train"))
	assert.Equal(t, 1, code)
	assert.Contains(t, errb, "the default, 1TiB")
	_, out, _ := gpumem(t, nil, "help", "replay")
	assert.Contains(t, out, "(default 1TiB)")
	big := filepath.Join(t.TempDir(), "big.csv")
	require.NoError(t, os.WriteFile(big, []byte("alloc,1,1099511627777,0\n"), 0o600))
	res, err := runReplayOOM(t, big)
	assert.Equal(t, int64(1), res.OOMs, "more than the default is out of memory, as the help says")
	assert.ErrorContains(t, err, "ran out of memory")
}

// --driver takes the words of the drivers its command runs on, and its
// help and its error list those alone; nothing speaks of Go functions to a
// CLI user.
func TestDriverListsWhatItsCommandRunsOn(t *testing.T) {
	for cmd, want := range map[string]string{"replay": "want sim or cuda", "stress": "want host or cuda"} {
		code, _, errb := gpumem(t, nil, cmd, "--driver", "tpu")
		assert.Equal(t, 1, code)
		assert.Contains(t, errb, want, cmd)
		assert.Contains(t, errb, "gpumem help "+cmd, "a usage error")
	}
	_, _, errb := gpumem(t, nil, "replay", "--driver", "host", traceFile("mlp_train"))
	assert.Contains(t, errb, `invalid value "host" for flag --driver: want sim or cuda`)
	_, _, errb = gpumem(t, nil, "stress", "--driver", "sim")
	assert.Contains(t, errb, `invalid value "sim" for flag --driver: want host or cuda`)
	for cmd, other := range map[string]string{"replay": "host (", "stress": "sim ("} {
		_, out, _ := gpumem(t, nil, "help", cmd)
		assert.Contains(t, out, "where memory comes from", cmd)
		assert.NotContains(t, out, other, "%s's help lists no driver it refuses", cmd)
		_, _, errb := gpumem(t, nil, cmd, "--driver", "cuda", traceFile("mlp_train"))
		assert.NotRegexp(t, `gpu\.\w+`, errb, "%s: a CLI user is told no Go API", cmd)
	}
}

func TestSizesTakeUnits(t *testing.T) {
	a := runReplay(t, "--max-reserved", "600MiB", traceFile("mlp_train"))
	b := runReplay(t, "--max-reserved", strings.TrimSpace("629145600"), traceFile("mlp_train"))
	assert.Equal(t, a.PeakReservedBytes, b.PeakReservedBytes)
}

// A file a command writes is never the trace it reads.
func TestOutputsNeverOverwriteTheTrace(t *testing.T) {
	f := filepath.Join(t.TempDir(), "trace.csv")
	data := gunzipped(t, "mlp_train")
	require.NoError(t, os.WriteFile(f, data, 0o600))
	for _, args := range [][]string{{"replay", "--timeline", f, f}, {"plot", "-o", f + ".svg", f + ".svg"}} {
		if args[0] == "plot" {
			require.NoError(t, os.WriteFile(f+".svg", data, 0o600))
		}
		code, _, errb := gpumem(t, nil, args...)
		assert.Equal(t, 1, code, "%q", args)
		assert.Contains(t, errb, "is the trace it reads", "%q", args)
	}
	assert.Equal(t, data, mustRead(t, f), "the trace is whole")
}

// A cap below one page holds nothing: --max-reserved 10 once replayed with
// every allocation failing (exit 3). It is a bad flag, which names the
// least cap that can hold an allocation there.
func TestACapBelowOnePageIsABadFlag(t *testing.T) {
	tiny := filepath.Join(t.TempDir(), "tiny.csv")
	require.NoError(t, os.WriteFile(tiny, []byte("alloc,4096,512,0\nfree_requested,4096,512,0\n"), 0o600))
	for _, c := range []struct {
		flags []string
		least string
	}{
		{[]string{"--max-reserved", "10"}, "2MiB"},                        // the simulated H200's page
		{[]string{"--max-reserved", "1MiB", "--expand", "never"}, "2MiB"}, // a segment of small blocks
		{[]string{"--page-size", "64KiB", "--max-reserved", "32KiB"}, "64KiB"},
	} {
		code, out, errb := gpumem(t, nil, append(append([]string{"replay"}, c.flags...), tiny)...)
		assert.Equal(t, 1, code, "%q: %s", c.flags, errb)
		assert.Empty(t, out, "%q: nothing replayed", c.flags)
		assert.Contains(t, errb, "want 0 (no cap) or at least "+c.least, "%q", c.flags)
		assert.Contains(t, errb, "gpumem help replay", "%q: a bad flag's hint", c.flags)
	}
	for _, flags := range [][]string{{"--max-reserved", "2MiB"}, {"--page-size", "64KiB", "--max-reserved", "64KiB"}} {
		code, _, errb := gpumem(t, nil, append(append([]string{"replay"}, flags...), tiny)...)
		assert.Zero(t, code, "%q: one page holds the trace's 512 bytes: %s", flags, errb)
	}
}

// A simulated device smaller than one page is refused as a cap below one
// page is: every allocation would fail (exit 3) where the flag is what is
// wrong.
func TestACapacityBelowOnePageIsABadFlag(t *testing.T) {
	tiny := filepath.Join(t.TempDir(), "tiny.csv")
	require.NoError(t, os.WriteFile(tiny, []byte("alloc,4096,512,0\nfree_requested,4096,512,0\n"), 0o600))
	for flags, least := range map[string]string{"--capacity 1": "2MiB", "--capacity 1MiB --expand never": "2MiB", "--page-size 64KiB --capacity 32KiB": "64KiB"} {
		code, out, errb := gpumem(t, nil, append(append([]string{"replay"}, strings.Fields(flags)...), tiny)...)
		assert.Equal(t, 1, code, "%s: %s", flags, errb)
		assert.Empty(t, out)
		assert.Contains(t, errb, "a simulated device smaller than one page holds nothing, so every allocation would fail; want at least "+least, flags)
		assert.Contains(t, errb, "gpumem help replay", flags)
	}
	code, _, errb := gpumem(t, nil, "replay", "--page-size", "64KiB", "--capacity", "64KiB", tiny)
	assert.Zero(t, code, "one page holds the trace's 512 bytes: %s", errb)
}

// The help spells every flag as the help texts and the errors do,
// --name (-o, the one letter, aside), says size for every size, and
// speaks of a FILE only for commands that read one.
func TestTheHelpSpellsFlagsOneWay(t *testing.T) {
	for _, cmd := range commands {
		_, out, _ := gpumem(t, nil, "help", cmd.name)
		assert.NotRegexp(t, `(^|[\s(])-[a-z][a-z-]+`, strings.ReplaceAll(out, "-tags cuda", ""), "%s: a long flag with one dash", cmd.name)
		fs := flagSet(cmd.name, cmd.make())
		fs.VisitAll(func(f *flag.Flag) {
			value, _ := flag.UnquoteUsage(f)
			if _, ok := f.Value.(*byteFlag); ok {
				assert.Equal(t, "size", value, "%s --%s", cmd.name, f.Name)
			}
			dashes := "--"
			if len(f.Name) == 1 {
				dashes = "-"
			}
			assert.Contains(t, out, "\n  "+dashes+f.Name+" "+value+"\n", "%s lists --%s", cmd.name, f.Name)
		})
		assert.Equal(t, cmd.takesFile, strings.Contains(out, "FILE"), "%s: FILE in its help", cmd.name)
	}
}

// A bad flag's error spells it as the help does: package flag writes one
// dash, gpumem two.
func TestAFlagsErrorSpellsItAsTheHelpDoes(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"replay", "--max-reserved", "abc", "x"}, `invalid value "abc" for flag --max-reserved: want `},
		{[]string{"replay", "-max-reserved=1x", "x"}, `invalid value "1x" for flag --max-reserved: want `},
		{[]string{"replay", "--nope", "x"}, "flag provided but not defined: --nope\n"},
		{[]string{"stress", "--seconds"}, "flag needs an argument: --seconds\n"},
		{[]string{"plot", "-o"}, "flag needs an argument: -o\n"},
	} {
		code, _, errb := gpumem(t, nil, c.args...)
		assert.Equal(t, 1, code, "%q", c.args)
		assert.Contains(t, errb, c.says, "%q", c.args)
	}
}
