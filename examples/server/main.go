// Command server does GPU work per HTTP request: each request's buffers
// live in a scope opened with the request's context and a per-request
// Limit. A client that disconnects cancels its scope (the next allocation
// fails), a request over its limit gets 413, and after every request the
// device's allocated memory is back where it started.
//
//	go run ./examples/server
//
// It serves on a local port, sends itself a few requests (one of them
// cancelled mid-way), prints what happened, and exits.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpuscope/gpuscope/examples/internal/demo"
	"github.com/gpuscope/gpuscope/gpu"
)

// perRequest is what one request may hold at once.
const perRequest = 16 << 20

func main() { demo.Main("server", run) }

func run(w io.Writer) (err error) {
	// GPU 0 where the build and the machine have one, its pool capped at
	// 1 GiB; else a host-memory device of 1 GiB.
	dev, err := gpu.OpenDefault(gpu.MaxReserved(1<<30), gpu.HostMemory(1<<30))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dev.Close()) }()
	demo.Opened(w, dev)
	return runOn(w, dev)
}

// runOn is the example on dev, which run opened.
func runOn(w io.Writer, dev *gpu.Device) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	ended := make(chan error, 1)
	srv := &http.Server{Handler: &handler{dev: dev, ended: ended}}
	go srv.Serve(ln) //nolint:errcheck // ends with Shutdown below
	defer srv.Shutdown(context.Background())
	base := "http://" + ln.Addr().String()
	demo.Report(w, "before the requests", dev)

	for _, mib := range []int{4, 8, 32} {
		status, body, err := get(context.Background(), base, mib)
		if err != nil {
			return err
		}
		<-ended
		fmt.Fprintf(w, "request for %d MiB: %d %s\n", mib, status, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	_, _, err = get(ctx, base, 12) // 12 steps of 5 ms: the client gives up first
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("the request for 12 MiB should time out after 20 ms, got %v", err)
	}
	fmt.Fprintln(w, "request for 12 MiB: the client gave up after 20 ms, before the server had done 60 ms of work")
	// The handler notices at its next allocation, and its scope ends.
	if err := <-ended; errors.Is(err, context.Canceled) {
		fmt.Fprintln(w, "  the server saw the request cancelled: its next allocation failed and its scope freed what it held")
	} else {
		fmt.Fprintf(w, "  the server finished before it saw the client leave (%v)\n", err)
	}
	demo.Report(w, "after the requests", dev)
	return nil
}

func get(ctx context.Context, base string, mib int) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/work?mib="+strconv.Itoa(mib), nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body)), err
}

// handler allocates the MiB the request asks for, one at a time, in a
// scope that ends with the request.
type handler struct {
	dev   *gpu.Device
	step  time.Duration // work per MiB; 5 ms when zero
	ended chan<- error  // where set, gets each request's scope's error once the scope has ended
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	mib, err := strconv.Atoi(r.URL.Query().Get("mib"))
	if err != nil || mib < 1 || mib > 1024 {
		http.Error(w, "mib must be 1 to 1024", http.StatusBadRequest)
		return
	}
	step := h.step
	if step == 0 {
		step = 5 * time.Millisecond
	}
	err = gpu.WithScope(r.Context(), h.dev, func(s *gpu.Scope) error {
		for i := range mib {
			b, err := s.Alloc(1 << 20)
			if err != nil {
				return err
			}
			if err := b.Memset(byte(i)); err != nil {
				return err
			}
			time.Sleep(step) // the work a kernel would do
		}
		return nil
	}, gpu.Name("request"), gpu.Limit(perRequest))
	if h.ended != nil {
		defer func() { h.ended <- err }()
	}
	switch {
	case err == nil:
		fmt.Fprintf(w, "processed %d MiB", mib)
	case errors.Is(err, gpu.ErrOutOfMemory):
		http.Error(w, fmt.Sprintf("over the %s a request may hold", gpu.Bytes(perRequest)), http.StatusRequestEntityTooLarge)
	case r.Context().Err() != nil:
		// The client is gone; nobody reads a response.
	default:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}
