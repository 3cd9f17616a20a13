package main

import (
	"bytes"
	"compress/gzip"
	"testing"

	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/pool/sim"
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
		events, err := readTrace(bytes.NewReader(data))
		if err != nil {
			return
		}
		last := 0
		for _, ev := range events {
			if !knownActions[ev.action] || ev.size < 0 || ev.line <= last {
				t.Fatalf("event %+v after line %d", ev, last)
			}
			last = ev.line
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
