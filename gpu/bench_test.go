package gpu_test

import (
	"context"
	"testing"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/internal/host"
	"github.com/gpuscope/gpuscope/pool"
)

// BenchmarkWithScope enters and leaves a scope that allocates nothing.
func BenchmarkWithScope(b *testing.B) {
	gpu.RecordStacks(false) // TestMain records stacks; this measures without
	defer gpu.RecordStacks(true)
	dev := openHost(b)
	ctx := context.Background()
	fn := func(*gpu.Scope) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		if err := gpu.WithScope(ctx, dev, fn); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScopeAllocFree is a cached allocation and free of a Buffer
// through a scope; BenchmarkBarePoolAllocFree is the same pair on the pool
// alone, so the difference is the scope's own cost.
func BenchmarkScopeAllocFree(b *testing.B) {
	gpu.RecordStacks(false) // TestMain records stacks; this measures without
	defer gpu.RecordStacks(true)
	dev := openHost(b)
	s, err := dev.NewScope()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ReportAllocs()
	for b.Loop() {
		x, err := s.Alloc(4096)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Free(x); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBarePoolAllocFree(b *testing.B) {
	drv, err := host.New(1 << 30)
	if err != nil {
		b.Fatal(err)
	}
	p, err := pool.New(drv)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	b.ReportAllocs()
	for b.Loop() {
		x, err := p.Alloc(4096)
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Free(x); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScopeAllocReleasedAtExit allocates 64 buffers per scope and lets
// the scope's end release them: the cost per allocation of the common
// pattern, to set against BenchmarkBarePoolAllocFree.
func BenchmarkScopeAllocReleasedAtExit(b *testing.B) {
	gpu.RecordStacks(false)
	defer gpu.RecordStacks(true)
	dev := openHost(b)
	ctx := context.Background()
	const perScope = 64
	fn := func(s *gpu.Scope) error {
		for range perScope {
			if _, err := s.Alloc(4096); err != nil {
				return err
			}
		}
		return nil
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := gpu.WithScope(ctx, dev, fn); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perScope), "ns/alloc")
}

// BenchmarkHostDeviceClose closes a host device that held 64 MiB: the
// cost of giving the memory back.
func BenchmarkHostDeviceClose(b *testing.B) {
	b.ReportAllocs()
	data := make([]byte, 64<<20)
	for b.Loop() {
		b.StopTimer()
		dev, err := gpu.OpenHost()
		if err != nil {
			b.Fatal(err)
		}
		err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			buf, err := s.Alloc(int64(len(data)))
			if err == nil {
				err = buf.CopyFromHost(data)
			}
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := dev.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
