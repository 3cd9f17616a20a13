package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// summary prints what a trace holds: counts, the peak and its line, what
// is left live, the largest allocation, streams, and the scopes that peak
// highest, listed at most --scopes of them; it reads the header
// StartRecording writes and the one before it alike.
func TestSummarySaysWhatATraceHolds(t *testing.T) {
	for _, header := range []string{"action,addr,size,stream,scope", "action,addr,size,stream"} {
		in := header + `
segment_alloc,0,2097152,0,
alloc,1,1000,0,train/step
alloc,2,3000,7,train/step
alloc,3,500,0,eval
free_requested,2,3000,7,
free_requested,1,1000,0,
alloc,4,2048,0,weights
free_requested,99,64,0,
`
		code, out, errb := gpumem(t, strings.NewReader(in), "summary", "-")
		require.Zero(t, code, errb)
		assert.Equal(t, `standard input: 4 allocs, 3 frees, 1 other event (PyTorch's, which a replay ignores)
  peak live:     4500 bytes (4.39 KiB), at line 5
  live at end:   2 allocations, 2548 bytes (2.49 KiB), never freed in the trace
  largest:       3000 bytes (2.93 KiB), at line 4
  streams:       2
  scopes, by the most each held live at once:
    "train/step"  3.91 KiB
    "weights"     2.00 KiB
    "eval"        500 B
`, out, "header %q", header)
	}
	code, out, _ := gpumem(t, strings.NewReader("alloc,1,64,0,a\nalloc,2,64,0,b\nalloc,3,64,0,c\n"), "summary", "--scopes", "2", "-")
	require.Zero(t, code)
	assert.Contains(t, out, "  scopes, the 2 that peak highest, by the most each held live at once:\n    \"a\"  64 B\n    \"b\"  64 B\n")
	code, out, _ = gpumem(t, nil, "summary", traceFile("mlp_train"))
	require.Zero(t, code)
	assert.Contains(t, out, "peak live:     490672332 bytes (467.94 MiB), at line 92", "replay's peak_requested")
	assert.Contains(t, out, "scopes:        none named (the trace has no scope column)")
}

func TestSummaryRefusesWhatItCannotRead(t *testing.T) {
	for in, want := range map[string]string{
		"":                             "no alloc event: the trace is empty",
		"alloc,1,64,0\nalloc,1,64,0\n": "trace line 2: alloc at 1, which line 1 allocated and nothing freed",
		"alloc,1,64,0\nfree_requested,1,64,0\nfree_requested,1,64,0\n": "trace line 3: double free of 1, freed at line 2",
	} {
		code, _, errb := gpumem(t, strings.NewReader(in), "summary", "-")
		assert.Equal(t, 1, code)
		assert.Contains(t, errb, want)
	}
	code, _, errb := gpumem(t, nil, "summary", "a.csv", "b.csv")
	assert.Equal(t, 1, code)
	assert.Contains(t, errb, `gpumem: summary needs one trace FILE (or - for standard input), got 2: "a.csv" and "b.csv"`)
}

// A stray argument is named, and a unit a space parted from its number
// is said to be one: "--max-reserved 10 MiB t.csv" is --max-reserved 10
// and two files.
func TestAStrayArgumentIsNamed(t *testing.T) {
	code, _, errb := gpumem(t, nil, "replay", "--max-reserved", "10", "MiB", "t.csv")
	assert.Equal(t, 1, code)
	assert.Contains(t, errb, `gpumem: replay needs one trace FILE (or - for standard input), got 2: "MiB" and "t.csv"; `+
		`"MiB" is a unit a space parted from its number: write a size as one word (10MiB)`)
	code, _, errb = gpumem(t, nil, "replay", "t.csv", "--capacity=4", "GiB")
	assert.Equal(t, 1, code)
	assert.Contains(t, errb, `got 2: "t.csv" and "GiB"; "GiB" is a unit a space parted from its number`)
	code, _, errb = gpumem(t, nil, "plot", "-o", "x.svg", "a.csv", "b.csv")
	assert.Equal(t, 1, code)
	assert.Contains(t, errb, `got 2: "a.csv" and "b.csv"`)
	assert.NotContains(t, errb, "is a unit")
	// A word that reads as a unit but follows no flag's number is a file.
	for _, args := range [][]string{{"summary", "a", "b"}, {"summary", "10", "B"}, {"plot", "-o", "x.svg", "a.csv", "B"}} {
		code, _, errb = gpumem(t, nil, args...)
		assert.Equal(t, 1, code)
		assert.NotContains(t, errb, "is a unit", "%q", args)
	}
}
