package gpu

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// WriteProfile writes the device's live buffers as a pprof profile (gzipped
// protobuf), so that `go tool pprof -top FILE` or `-http` shows which Go
// functions hold device memory. Its sample types are those of a heap
// profile's in-use view: inuse_space (bytes, the default) and inuse_objects
// (buffers). Each sample is labelled with its scope's path. Allocation
// stacks are there where they are recorded ([RecordStacks], or
// gputest.VerifyTestMain); otherwise a buffer's one frame names its scope.
func (d *Device) WriteProfile(w io.Writer) error {
	if err := d.usable(); err != nil {
		return err
	}
	p := &profile.Profile{
		SampleType:        []*profile.ValueType{{Type: "inuse_objects", Unit: "count"}, {Type: "inuse_space", Unit: "bytes"}},
		DefaultSampleType: "inuse_space",
		PeriodType:        &profile.ValueType{Type: "space", Unit: "bytes"},
		Period:            1,
		TimeNanos:         time.Now().UnixNano(),
	}
	funcs := map[string]*profile.Function{}
	locs := map[string]*profile.Location{}
	location := func(fn, file string, line int64) *profile.Location {
		key := fmt.Sprintf("%s\x00%s\x00%d", fn, file, line)
		if l, ok := locs[key]; ok {
			return l
		}
		f, ok := funcs[fn+"\x00"+file]
		if !ok {
			f = &profile.Function{ID: uint64(len(funcs) + 1), Name: fn, SystemName: fn, Filename: file}
			funcs[fn+"\x00"+file] = f
			p.Function = append(p.Function, f)
		}
		l := &profile.Location{ID: uint64(len(locs) + 1), Line: []profile.Line{{Function: f, Line: line}}}
		locs[key] = l
		p.Location = append(p.Location, l)
		return l
	}
	for _, s := range d.tree.Scopes() {
		info, _ := s.Info() // nothing where it ended since
		for _, a := range info.Allocations {
			var stack []*profile.Location
			if pcs := a.Stack; len(pcs) > 0 {
				fs := runtime.CallersFrames(pcs)
				for {
					f, more := fs.Next()
					if !ownFrame(f.Function) && !strings.HasPrefix(f.Function, "runtime.") {
						stack = append(stack, location(f.Function, f.File, int64(f.Line)))
					}
					if !more {
						break
					}
				}
			}
			if len(stack) == 0 {
				stack = []*profile.Location{location("(scope "+s.Path()+", stack not recorded)", "", 0)}
			}
			p.Sample = append(p.Sample, &profile.Sample{
				Location: stack,
				Value:    []int64{1, a.Size},
				Label:    map[string][]string{"scope": {s.Path()}},
			})
		}
	}
	if err := p.Write(w); err != nil {
		return prefixed.Wrap("gpu", err, "writing the profile")
	}
	return nil
}
