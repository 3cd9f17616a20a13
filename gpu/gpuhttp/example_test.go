package gpuhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/google/pprof/profile"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gpuhttp"
)

// A server serves the device's profile beside net/http/pprof's; go tool
// pprof http://host:port/debug/pprof/gpu0 reads it.
func ExampleProfileHandler() {
	dev, err := gpu.OpenHost()
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	weights, err := dev.NewScope(gpu.Name("weights"))
	if err != nil {
		panic(err)
	}
	defer weights.Close()
	if _, err := weights.Alloc(1 << 20); err != nil {
		panic(err)
	}

	mux := http.NewServeMux()
	mux.Handle("/debug/pprof/gpu0", gpuhttp.ProfileHandler(dev))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/debug/pprof/gpu0")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	p, err := profile.Parse(resp.Body)
	if err != nil {
		panic(err)
	}
	for _, s := range p.Sample {
		fmt.Println(s.Label["scope"], s.Value[1], "bytes")
	}
	// Output:
	// [weights] 1048576 bytes
}
