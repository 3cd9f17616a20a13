package gputest_test

import (
	"context"
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
	// reported: found unexpected GPU memory: 1 scopes open, 1 buffers (4.00 KiB) live
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
