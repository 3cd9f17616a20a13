package foreign

import (
	"fmt"
	"testing"

	"github.com/gpuscope/gpuscope/gpu"
)

// BenchmarkPair is an alloc+free pair as the C entry points make it when
// the pair cache does not serve it, less the crossing from C: device 0's
// current scope, the table, the scope's pool, at the sizes issue 37 times.
// (cmd/libgpuscope's BenchmarkCPairGo times it from C.)
func BenchmarkPair(b *testing.B) {
	noStacks(b)
	b.Setenv("GPUSCOPE_HOST_MEMORY", "1073741824")
	defer func() {
		if err := Shutdown(); err != nil {
			b.Fatal(err)
		}
	}()
	for _, size := range []int64{256, 1 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ptr, err := Alloc(0, 0, size, 0)
				if err != nil {
					b.Fatal(err)
				}
				if err := Free(0, ptr, size, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkScopePair is the same pair through a gpu.Scope directly: what
// the C path adds to it is the table and finding the scope.
func BenchmarkScopePair(b *testing.B) {
	noStacks(b)
	dev, err := gpu.OpenHost(gpu.HostMemory(256 << 20))
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	s, err := dev.NewScope()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ReportAllocs()
	for b.Loop() {
		buf, err := s.Alloc(4096)
		if err != nil {
			b.Fatal(err)
		}
		_ = buf.Ptr()
		if err := s.Free(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// noStacks turns off the recording of allocation stacks that the leak
// check of TestMain turns on: a library's process records none.
func noStacks(b *testing.B) {
	gpu.RecordStacks(false)
	b.Cleanup(func() { gpu.RecordStacks(true) })
}
