package sim

import (
	"fmt"
	"os"
)

// Wrap returns m wrapped so that its Run runs the tests and then, if they passed,
// fails when any Source still holds memory or reservations ([Held]): a pool
// some test left open. It composes with goleak:
// goleak.VerifyTestMain(sim.Wrap(m)). Packages that open gpu devices use
// gputest.Wrap instead.
func Wrap(m interface{ Run() int }) interface{ Run() int } { return wrapped{m} }

type wrapped struct{ m interface{ Run() int } }

func (w wrapped) Run() int {
	code := w.m.Run()
	if code != 0 {
		return code
	}
	if bytes, reserves := Held(); bytes != 0 || reserves != 0 {
		fmt.Fprintf(os.Stderr, "sim: after a successful test run, Sources still hold %d bytes and %d reservations: a pool was not closed\n", bytes, reserves)
		return 1
	}
	return 0
}
