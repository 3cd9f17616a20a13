// Package gpuhttp serves a device's memory over HTTP, apart from package
// gpu as net/http/pprof is apart from runtime/pprof: a program that uses gpu
// links no HTTP stack unless it imports this package.
//
//	http.Handle("/debug/pprof/gpu0", gpuhttp.ProfileHandler(dev))
//
// and then: go tool pprof http://host:port/debug/pprof/gpu0
package gpuhttp

import (
	"net/http"

	"github.com/gpuscope/gpuscope/gpu"
)

// ProfileHandler serves dev's live buffers as a pprof profile (see
// [gpu.Device.WriteProfile]), beside net/http/pprof's profiles. A request
// for a closed device is answered 500 with the error. It is safe for
// concurrent use.
func ProfileHandler(dev *gpu.Device) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="gpu.pprof"`)
		if err := dev.WriteProfile(w); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
}
