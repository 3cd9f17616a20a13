package gputest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
)

// reporter stands in for a *testing.T: it prints the first line of what
// the check reports.
type reporter struct{ failed bool }

func (r *reporter) Error(args ...any) {
	r.failed = true
	fmt.Println("reported:", strings.SplitN(fmt.Sprint(args...), "\n", 2)[0])
}

// VerifyNone reports scopes left open and buffers left live; in a test,
// pass the *testing.T (or use VerifyTestMain in TestMain).
func ExampleVerifyNone() {
	dev, err := gpu.OpenHost()
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	forgotten, err := dev.NewScope(gpu.Name("cache"))
	if err != nil {
		panic(err)
	}
	if _, err := forgotten.Alloc(4096); err != nil {
		panic(err)
	}
	r := &reporter{}
	gputest.VerifyNone(r)
	fmt.Println("leak found:", r.failed)

	if err := forgotten.Close(); err != nil {
		panic(err)
	}
	r = &reporter{}
	gputest.VerifyNone(r)
	fmt.Println("after Close, leak found:", r.failed)
	// Output:
	// reported: found unexpected GPU memory: 1 scope open, 1 buffer (4.00 KiB) live
	// leak found: true
	// after Close, leak found: false
}

// Steady tells a cache from a leak: memory that plateaus passes, memory
// that grows at every iteration fails.
func ExampleSteady() {
	dev, err := gpu.OpenHost()
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	held, err := dev.NewScope(gpu.Name("held"))
	if err != nil {
		panic(err)
	}
	defer held.Close()

	perStep := func() error { // everything it allocates ends with the step
		return gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			_, err := s.Alloc(1 << 20)
			return err
		})
	}
	leaky := func() error { // keeps 1 MiB more in a long-lived scope at every call
		_, err := held.Alloc(1 << 20)
		return err
	}
	r := &reporter{}
	gputest.Steady(r, 2, 5, perStep)
	fmt.Println("per-step scopes steady:", !r.failed)
	r = &reporter{}
	gputest.Steady(r, 2, 5, leaky)
	fmt.Println("growing scope steady:", !r.failed)
	// Output:
	// per-step scopes steady: true
	// reported: gputest: memory held by buffers grew in 5 of 5 iterations after 2 warm-ups:
	// growing scope steady: false
}

// A test makes the device fail where a real GPU might, and checks what the
// program does then: here, that a failed upload leaves no memory behind
// and that the next request works.
func ExampleOpenFaulty() {
	dev, faults, err := gputest.OpenFaulty(64 << 20)
	if err != nil {
		panic(err)
	}
	defer dev.Close()

	upload := func() error {
		return gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			b, err := s.Alloc(1 << 20)
			if err != nil {
				return err
			}
			return b.CopyFromHost(make([]byte, 1<<20))
		})
	}
	faults.FailNth(gputest.OpCopy, 1) // the next copy fails
	err = upload()
	fmt.Println("injected:", errors.Is(err, gputest.ErrInjected), "live after:", dev.Stats().Allocated)
	fmt.Println("next upload:", upload())

	// From now on the device gives no more memory: the pool may serve what
	// it caches, and what needs more fails.
	faults.FailWhen(func(c gputest.Call) bool { return c.Op == gputest.OpAlloc })
	err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(32 << 20)
		return err
	})
	fmt.Println("injected:", errors.Is(err, gputest.ErrInjected))
	// Output:
	// injected: true live after: 0
	// next upload: <nil>
	// injected: true
}

// FailNth(OpRequest, n) fails the nth allocation the program asks for from
// now, as out of memory, whether or not the pool's cache would serve it: a
// test's "out of memory mid-request". OpAlloc fails the driver's calls,
// which a warm pool does not make.
func ExampleFaults_FailNth() {
	dev, faults, err := gputest.OpenFaulty(64 << 20)
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	request := func() error { // three buffers of 1 MiB, freed when it ends
		return gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			for range 3 {
				if _, err := s.Alloc(1 << 20); err != nil {
					return err
				}
			}
			return nil
		}, gpu.Name("request"))
	}
	fmt.Println("first request:", request()) // the pool keeps its memory for the next

	faults.FailNth(gputest.OpAlloc, 1)
	fmt.Println("OpAlloc, warm pool:", request(), "injected", faults.Injected())
	faults.FailNth(gputest.OpAlloc, 0)

	faults.FailNth(gputest.OpRequest, 2)
	err = request()
	fmt.Println("OpRequest:", strings.SplitN(err.Error(), ";", 2)[0]) // then the largest holders
	fmt.Println("out of memory:", errors.Is(err, gpu.ErrOutOfMemory), "injected:", errors.Is(err, gputest.ErrInjected))
	// Output:
	// first request: <nil>
	// OpAlloc, warm pool: <nil> injected 0
	// OpRequest: gpu: out of memory: 1.00 MiB in scope "request": injected fault: Alloc of 1.00 MiB, request 8, by FailNth
	// out of memory: true injected: true
}

// Hold stands in for a long kernel: work queued on a held stream waits
// until it is released.
func ExampleFaults_Hold() {
	dev, faults, err := gputest.OpenFaulty(0)
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		st, err := s.NewStream()
		if err != nil {
			return err
		}
		release, err := faults.Hold(st)
		if err != nil {
			return err
		}
		if err := faults.Enqueue(st, func() error { fmt.Println("the kernel runs"); return nil }); err != nil {
			return err
		}
		fmt.Println("the stream is held")
		release()
		return st.Synchronize()
	})
	fmt.Println(err)
	// Output:
	// the stream is held
	// the kernel runs
	// <nil>
}
