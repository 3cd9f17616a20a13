package gputest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/internal/registry"
	"github.com/gpuscope/gpuscope/internal/units"
)

// TestingT is the part of *testing.T that VerifyNone and Steady use.
type TestingT interface {
	Error(args ...any)
}

// Find returns an error describing every open scope, live buffer and
// other resource a scope owns (streams, events, modules, page-locked
// memory) on the devices open now, or nil. It retries with a bounded backoff first, so
// that a scope another goroutine is closing is not reported.
func Find(opts ...Option) error {
	o := buildOptions(opts)
	if err := o.validFor("Find", false); err != nil {
		return err
	}
	return find(o)
}

func find(o *options) error {
	forced := forcedCloses(o) // taken once: they do not come back on a retry
	if dropped := registry.TakeDroppedErrors(o.devices...); len(dropped) > 0 {
		// Errors no caller could receive: a failure, not a leak to wait out.
		return fmt.Errorf("gputest: releasing memory failed where no caller could hear it:\n%w", errors.Join(dropped...))
	}
	sleep := time.Microsecond
	for attempt := 0; ; attempt++ {
		leaks := append(slices.Clone(forced), collect(o)...)
		if len(leaks) == 0 {
			return nil
		}
		if attempt >= o.maxRetries {
			return errors.New(report(leaks))
		}
		if o.onRetry != nil {
			o.onRetry(attempt)
		}
		time.Sleep(sleep)
		sleep = min(2*sleep, o.maxSleep)
	}
}

// VerifyNone marks t failed if Find reports leaks.
func VerifyNone(t TestingT, opts ...Option) {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	o := buildOptions(opts)
	if err := o.validFor("VerifyNone", false); err != nil {
		t.Error(err)
		return
	}
	if err := find(o); err != nil {
		t.Error(err)
	}
}

// forcedCloses lists the scopes a device's Close found open since the last
// look, not ignored: their memory is gone, the leak is not.
func forcedCloses(o *options) []gpu.ScopeSnapshot {
	var leaks []gpu.ScopeSnapshot
	for _, s := range registry.TakeForcedCloses[gpu.ScopeSnapshot](o.devices...) {
		if o.ignored(s) {
			continue
		}
		s.Path += " (closed by Device.Close)"
		leaks = append(leaks, s)
	}
	return leaks
}

// collect lists what is live and not ignored.
func collect(o *options) []gpu.ScopeSnapshot {
	var leaks []gpu.ScopeSnapshot
	for _, snap := range registry.Snapshots[*gpu.Snapshot]() {
		if len(o.devices) > 0 && !slices.Contains(o.devices, snap.Device) {
			continue
		}
		var ignoredPaths []string
		for _, s := range snap.Scopes {
			if slices.Contains(o.ignoredNames, s.Name) || slices.Contains(o.ignoredNames, s.Path) ||
				slices.ContainsFunc(ignoredPaths, func(p string) bool { return strings.HasPrefix(s.Path, p+"/") }) {
				ignoredPaths = append(ignoredPaths, s.Path)
				continue
			}
			var bufs []gpu.BufferSnapshot
			for _, b := range s.Buffers {
				if !o.ignoredBufs[b.Key] {
					bufs = append(bufs, b)
				}
			}
			var res []gpu.ResourceSnapshot
			for _, r := range s.Resources {
				if !o.ignoredRes[r.ID] {
					res = append(res, r)
				}
			}
			if o.ignoredScopes[s.ID] && len(bufs) == 0 && len(res) == 0 {
				continue
			}
			s.Buffers, s.Resources = bufs, res
			leaks = append(leaks, s)
		}
	}
	return leaks
}

// ignored reports whether s is ignored by name or as a scope live at
// IgnoreCurrent, with nothing new in it.
func (o *options) ignored(s gpu.ScopeSnapshot) bool {
	if slices.Contains(o.ignoredNames, s.Name) || slices.ContainsFunc(o.ignoredNames, func(n string) bool {
		return s.Path == n || strings.HasPrefix(s.Path, n+"/")
	}) {
		return true
	}
	if !o.ignoredScopes[s.ID] {
		return false
	}
	for _, b := range s.Buffers {
		if !o.ignoredBufs[b.Key] {
			return false
		}
	}
	for _, r := range s.Resources {
		if !o.ignoredRes[r.ID] {
			return false
		}
	}
	return true
}

// report writes one block per leak, most useful line first, stack after.
func report(leaks []gpu.ScopeSnapshot) string {
	var b strings.Builder
	var total int64
	n := 0
	for _, s := range leaks {
		for _, buf := range s.Buffers {
			total += buf.Size
			n++
		}
	}
	others := 0
	for _, s := range leaks {
		others += len(s.Resources)
	}
	fmt.Fprintf(&b, "found unexpected GPU memory: %s open, %s (%s) live",
		units.Count(len(leaks), "scope"), units.Count(n, "buffer"), gpu.Bytes(total))
	if others > 0 {
		fmt.Fprintf(&b, ", and %s", units.Count(others, "stream, event, module or page-locked allocation",
			"streams, events, modules or page-locked allocations"))
	}
	b.WriteString("\n")
	for _, s := range leaks {
		fmt.Fprintf(&b, "\n[Scope %q open on device %s, %s live]\n", s.Path, s.Device, gpu.Bytes(s.Live))
		writeStack(&b, "opened at", s.OpenedAt)
		for _, buf := range s.Buffers {
			fmt.Fprintf(&b, "\n[Buffer of %s at %#x in scope %q on device %s]\n",
				gpu.Bytes(buf.Size), buf.Address, s.Path, s.Device)
			writeStack(&b, "allocated at", buf.AllocatedAt)
		}
		for _, r := range s.Resources {
			size := ""
			if r.Bytes > 0 {
				size = " of " + gpu.Bytes(r.Bytes).String()
			}
			kind := r.Kind
			if kind != "" {
				kind = strings.ToUpper(kind[:1]) + kind[1:]
			}
			fmt.Fprintf(&b, "\n[%s%s in scope %q on device %s]\n", kind, size, s.Path, s.Device)
			writeStack(&b, "made at", r.MadeAt)
		}
	}
	return b.String()
}

func writeStack(b *strings.Builder, what string, frames []string) {
	if len(frames) == 0 {
		fmt.Fprintf(b, "  %s: (not recorded; gputest.VerifyTestMain or gpu.RecordStacks(true) records it)\n", what)
		return
	}
	fmt.Fprintf(b, "  %s:\n", what)
	for _, f := range frames {
		fn, at, _ := strings.Cut(f, " ")
		fmt.Fprintf(b, "    %s\n      %s\n", fn, at)
	}
}
