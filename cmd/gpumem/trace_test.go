package main

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/internal/trace"
	"github.com/gpuscope/gpuscope/pool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FuzzReadTrace feeds the trace reader arbitrary bytes: it must return
// events that make sense or an error, never panic, and a replay of what it
// returns must not panic either.
func FuzzReadTrace(f *testing.F) {
	f.Add([]byte("action,addr,size,stream\nalloc,1,64,0\nfree_requested,1,64,0\n"))
	f.Add([]byte("alloc,1,2\n"))
	f.Add([]byte("alloc,18446744073709551615,9223372036854775807,0\nfree_requested,18446744073709551615,1,0\n"))
	f.Add([]byte("# comment\n\nsegment_alloc,5,2097152,7\nalloc,5,100,7\n"))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte("alloc,1,64,0\nfree_requested,1,64,0\n"))
	_ = zw.Close()
	f.Add(gz.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		events, err := trace.ReadAll(bytes.NewReader(data))
		if err != nil {
			return
		}
		last := 0
		for _, ev := range events {
			if !trace.Known(ev.Action) || ev.Size < 0 || ev.Line <= last {
				t.Fatalf("event %+v after line %d", ev, last)
			}
			last = ev.Line
		}
		if len(events) > 200 {
			return
		}
		src, m, err := newMeter(sim.New(1<<30, 0), sim.H200)
		if err != nil {
			t.Fatal(err)
		}
		p, err := pool.New(src, pool.Shards(1))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = replay(p, inMemory(events), m, 2, nil)
		_ = p.Close()
	})
}

func TestBadTracesNameTheLine(t *testing.T) {
	cases := map[string]struct{ trace, want string }{
		"a malformed line":             {"action,addr,size,stream\nalloc,1,2\n", "line 2"},
		"an unknown action":            {"action,addr,size,stream\nalloc,1,2,0\nrealloc,1,2,0\n", `line 3: unknown action "realloc"`},
		"a negative size":              {"alloc,1,-2,0\n", "line 1"},
		"a double free":                {"alloc,1,64,0\nfree_requested,1,64,0\nfree_requested,1,64,0\n", "line 3: double free of 1, freed at line 2"},
		"an alloc over a live address": {"alloc,1,64,0\nalloc,1,64,0\n", "line 2"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "trace.csv")
			require.NoError(t, os.WriteFile(f, []byte(c.trace), 0o600))
			var out, errb bytes.Buffer
			err := run([]string{"replay", f}, &out, &errb)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}
