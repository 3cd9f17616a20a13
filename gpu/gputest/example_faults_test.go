package gputest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
)

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
