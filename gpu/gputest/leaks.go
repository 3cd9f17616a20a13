package gputest

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

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
// memory) on the devices open now, every scope a device's Close found
// open, and every device a test opened and never closed (its pool's memory
// still reserved), or nil. A device is reported once the test that opened
// it has ended, cleanups and all: by the check of a later test, or
// VerifyTestMain's, never by the check of the test that opened it (in its
// t.Cleanup too), whose t.Cleanup may still close it, nor while that test
// is paused at t.Parallel. Find retries with a bounded backoff
// first, so that a scope another goroutine is closing is not reported.
// What it reports, a later Find or VerifyNone leaves out (a leak fails
// one test, not every test after it), but for what is new in a scope it
// reported: a buffer allocated there since, say.
func Find(opts ...Option) error {
	o := buildOptions(opts)
	if err := o.validFor("Find", false); err != nil {
		return err
	}
	o.running = runningTest()
	return find(o)
}

func find(o *options) error {
	o.reported = registry.Reported()
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
			markReported(leaks)
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
	o.running = runningTest()
	if n, ok := t.(interface{ Name() string }); ok {
		// The test's own name: a check in a t.Cleanup that a helper
		// registered runs after the test's function returned.
		o.running, _, _ = strings.Cut(n.Name(), "/")
	}
	if err := find(o); err != nil {
		t.Error(err)
	}
}

// A leak is a scope with what it holds, open now or ended by its device's
// Close; or a device left open.
type leak struct {
	gpu.ScopeSnapshot
	ended  bool        // by Device.Close, which freed its memory
	device *openDevice // a device never closed; the scope is zero
}

// openDevice is a device a check found open, and what its pool holds.
type openDevice struct {
	id                  uint64 // the registry's
	name                string
	openedAt            []string
	reserved, allocated int64
}

// The keys under which the registry remembers what a check reported: a
// scope's and a resource's IDs apart, and a buffer's key.
type (
	scopeKey    uint64
	resourceKey uint64
	bufferKey   struct{ key any }
	deviceKey   uint64
)

// markReported remembers what a report names, so that later checks leave
// it out. Scopes a device's Close ended need no mark: they were taken.
func markReported(leaks []leak) {
	var keys []any
	for _, l := range leaks {
		if l.device != nil {
			keys = append(keys, deviceKey(l.device.id))
			continue
		}
		if l.ended {
			continue
		}
		keys = append(keys, scopeKey(l.ID))
		for _, b := range l.Buffers {
			keys = append(keys, bufferKey{b.Key})
		}
		for _, r := range l.Resources {
			keys = append(keys, resourceKey(r.ID))
		}
	}
	registry.MarkReported(keys)
}

// forcedCloses lists the scopes a device's Close found open since the last
// look, neither ignored nor reported open before the Close: their memory is
// gone, the leak is not.
func forcedCloses(o *options) []leak {
	var leaks []leak
	for _, s := range registry.TakeForcedCloses[gpu.ScopeSnapshot](o.devices...) {
		if o.ignored(s) {
			continue
		}
		leaks = append(leaks, leak{ScopeSnapshot: s, ended: true})
	}
	return leaks
}

// collect lists what is live, not ignored and not reported before: the
// scopes of the devices open, and the devices.
func collect(o *options) []leak {
	var leaks []leak
	for _, dev := range registry.Devices[*gpu.Snapshot]() {
		if len(o.devices) > 0 && !registry.Matches(o.devices, dev.Name) {
			continue
		}
		var ignoredPaths []string
		for _, s := range dev.Snapshot.Scopes {
			if slices.Contains(o.ignoredNames, s.Name) || slices.Contains(o.ignoredNames, s.Path) ||
				slices.ContainsFunc(ignoredPaths, func(p string) bool { return strings.HasPrefix(s.Path, p+"/") }) {
				ignoredPaths = append(ignoredPaths, s.Path)
				continue
			}
			var bufs []gpu.BufferSnapshot
			for _, b := range s.Buffers {
				if !o.knownBuffer(b.Key) {
					bufs = append(bufs, b)
				}
			}
			var res []gpu.ResourceSnapshot
			for _, r := range s.Resources {
				if !o.knownResource(r.ID) {
					res = append(res, r)
				}
			}
			if o.knownScope(s.ID) && len(bufs) == 0 && len(res) == 0 {
				continue
			}
			s.Buffers, s.Resources = bufs, res
			leaks = append(leaks, leak{ScopeSnapshot: s})
		}
		// A scope ignored by name holds its device open on purpose; a test
		// still running (the check's own, one paused at t.Parallel) may
		// yet close the devices it opened.
		if by := openingTest(dev.OpenedAt); by != "" && by != "TestMain" && by != o.running &&
			len(ignoredPaths) == 0 && !o.ignoredDevs[dev.ID] && !o.reported[deviceKey(dev.ID)] &&
			!o.stillRunning(testFunction(dev.OpenedAt)) {
			st := dev.Snapshot.Stats
			leaks = append(leaks, leak{device: &openDevice{dev.ID, dev.Name, dev.OpenedAt, st.Reserved, st.Allocated}})
		}
	}
	return leaks
}

// ignored reports whether s is ignored by name, or was live at
// IgnoreCurrent or reported by an earlier check, with nothing new in it.
func (o *options) ignored(s gpu.ScopeSnapshot) bool {
	if slices.Contains(o.ignoredNames, s.Name) || slices.ContainsFunc(o.ignoredNames, func(n string) bool {
		return s.Path == n || strings.HasPrefix(s.Path, n+"/")
	}) {
		return true
	}
	if !o.knownScope(s.ID) {
		return false
	}
	for _, b := range s.Buffers {
		if !o.knownBuffer(b.Key) {
			return false
		}
	}
	for _, r := range s.Resources {
		if !o.knownResource(r.ID) {
			return false
		}
	}
	return true
}

// knownScope, knownBuffer and knownResource report whether IgnoreCurrent
// saw the thing or an earlier check reported it.
func (o *options) knownScope(id uint64) bool {
	return o.ignoredScopes[id] || o.reported[scopeKey(id)]
}

func (o *options) knownBuffer(key any) bool {
	return o.ignoredBufs[key] || o.reported[bufferKey{key}]
}

func (o *options) knownResource(id uint64) bool {
	return o.ignoredRes[id] || o.reported[resourceKey(id)]
}

// report writes one block per leak, most useful line first, stack after.
func report(leaks []leak) string {
	var b strings.Builder
	fmt.Fprintf(&b, "found unexpected GPU memory: %s\n", headline(leaks))
	for _, s := range leaks {
		if d := s.device; d != nil {
			fmt.Fprintf(&b, "\n[Device %s open, never closed%s: %s reserved, %s allocated; Device.Close gives it back]\n",
				d.name, openedBy(d.openedAt), gpu.Bytes(d.reserved), gpu.Bytes(d.allocated))
			writeStack(&b, "opened at", d.openedAt)
			continue
		}
		if s.ended {
			fmt.Fprintf(&b, "\n[Scope %q on device %s left open%s, ended by Device.Close with %s in use]\n",
				s.Path, s.Device, openedBy(s.OpenedAt), gpu.Bytes(s.Live))
		} else {
			fmt.Fprintf(&b, "\n[Scope %q open on device %s%s, %s live]\n", s.Path, s.Device, openedBy(s.OpenedAt), gpu.Bytes(s.Live))
		}
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

// headline counts the leaks: scopes open, scopes a Close ended, devices
// open.
func headline(leaks []leak) string {
	var open, ended, devices, openBufs, endedBufs, others int
	var openBytes, endedBytes, reserved int64
	for _, l := range leaks {
		n, bytes := &openBufs, &openBytes
		switch {
		case l.device != nil:
			devices++
			reserved += l.device.reserved
			continue
		case l.ended:
			ended++
			n, bytes = &endedBufs, &endedBytes
		default:
			open++
			others += len(l.Resources)
		}
		for _, buf := range l.Buffers {
			*bytes += buf.Size
			*n++
		}
	}
	var parts []string
	if open > 0 {
		p := fmt.Sprintf("%s open, %s (%s) live", units.Count(open, "scope"), units.Count(openBufs, "buffer"), gpu.Bytes(openBytes))
		if others > 0 {
			p += ", and " + units.Count(others, "stream, event, module or page-locked allocation",
				"streams, events, modules or page-locked allocations")
		}
		parts = append(parts, p)
	}
	if ended > 0 {
		p := units.Count(ended, "scope") + " left open, ended by Device.Close"
		if endedBufs > 0 {
			p += fmt.Sprintf(" with %s (%s)", units.Count(endedBufs, "buffer"), gpu.Bytes(endedBytes))
		}
		parts = append(parts, p)
	}
	if devices > 0 {
		parts = append(parts, fmt.Sprintf("%s never closed, %s reserved", units.Count(devices, "device"), gpu.Bytes(reserved)))
	}
	return strings.Join(parts, "; ")
}

// openedBy says which test opened a scope or a device, from where it was
// opened: ", opened by TestX", or "" where no test is on the stack.
func openedBy(frames []string) string {
	if test := openingTest(frames); test != "" {
		return ", opened by " + test
	}
	return ""
}

// runningTest names the test whose function called the check (Find,
// VerifyNone, a wrapped TestingM's Run), or "" where none did.
func runningTest() string {
	var pcs [64]uintptr
	fs := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs[:])])
	var frames []string
	for {
		f, more := fs.Next()
		frames = append(frames, f.Function+" "+f.File+":"+strconv.Itoa(f.Line))
		if !more {
			return openingTest(frames)
		}
	}
}

// openingTest returns the name of the test, benchmark, fuzz target or
// example whose function is on frames ("function file:line", innermost
// first), the outermost such, or "" where none is.
func openingTest(frames []string) string {
	fn := testFunction(frames)
	return fn[strings.LastIndex(fn, ".")+1:]
}

// testFunction is openingTest's test as a function ("pkg.TestX"), or "".
func testFunction(frames []string) string {
	for _, f := range slices.Backward(frames) {
		fn, at, _ := strings.Cut(f, " ")
		if !strings.Contains(at, "_test.go:") {
			continue
		}
		dir := strings.LastIndex(fn, "/") + 1
		pkg, name, _ := strings.Cut(fn[dir:], ".") // "pkg.TestX.func1"
		name, _, _ = strings.Cut(name, ".")
		for _, prefix := range []string{"Test", "Benchmark", "Fuzz", "Example"} {
			// As go test's rule: TestX or Test, not Testing.
			if rest, ok := strings.CutPrefix(name, prefix); ok && (rest == "" || !unicode.IsLower(rune(rest[0]))) {
				return fn[:dir] + pkg + "." + name
			}
		}
	}
	return ""
}

// stillRunning reports whether the test function fn ("pkg.TestX") or a
// function inside it (a subtest's) is on a goroutine's stack: the test is
// running, paused at t.Parallel, or waiting for its subtests, and may yet
// close what it opened. It reads every goroutine's stack, as goleak does.
func (o *options) stillRunning(fn string) bool {
	if o.othersEnded {
		return false
	}
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for line := range strings.Lines(string(buf)) {
		if rest, ok := strings.CutPrefix(line, fn); ok && (strings.HasPrefix(rest, "(") || strings.HasPrefix(rest, ".")) {
			return true
		}
	}
	return false
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
