package pool

import (
	"fmt"
	"math"

	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// An Option configures a Pool. Options are checked by [New]: a bad value is
// an error, never silently ignored, and so is an option given twice.
type Option interface {
	apply(*options)
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// Expansion says whether arenas grow in place by mapping pages.
type Expansion int

const (
	// ExpandAuto maps pages where the source is a [PageMapper] and allocates
	// whole segments otherwise. It is the default.
	ExpandAuto Expansion = iota
	// ExpandNever always allocates whole segments, as PyTorch does by default.
	ExpandNever
	// ExpandAlways requires a PageMapper source; New fails without one.
	ExpandAlways
)

type options struct {
	limit            int64   // bytes; 0 means none
	limitFraction    float64 // of the device's total; 0 means none
	releaseThreshold int64   // cached bytes kept at most after a free
	maxSplit         int64   // blocks this large are not split for smaller requests
	expansion        Expansion
	growthStep       int64 // expandable large arenas grow by multiples of this
	shards           int
	given            map[string]string // option name -> the call that gave it, to refuse one given twice
	errs             []error
}

func buildOptions(opts []Option) (options, error) {
	o := options{
		releaseThreshold: math.MaxInt64,
		maxSplit:         math.MaxInt64,
		expansion:        ExpandAuto,
		growthStep:       DefaultGrowthStep,
	}
	for _, opt := range opts {
		if opt == nil {
			return o, prefixed.Errorf("pool", "nil Option")
		}
		opt.apply(&o)
	}
	if len(o.errs) > 0 {
		return o, o.errs[0]
	}
	if o.limit > 0 && o.limitFraction > 0 {
		return o, prefixed.Errorf("pool", "both MaxReserved and MaxReservedFraction set; choose one")
	}
	return o, nil
}

// once records that the option name was given, as call (its name and
// argument); a second one is an error that names both calls.
func (o *options) once(name, call string) {
	if prev, ok := o.given[name]; ok {
		o.errs = append(o.errs, prefixed.Errorf("pool", "%s, then %s: an option given twice; give it once", prev, call))
	}
	if o.given == nil {
		o.given = map[string]string{}
	}
	o.given[name] = call
}

// capOption writes the option that set the cap, as the caller wrote it.
func (o options) capOption() string {
	if o.limitFraction > 0 {
		return fmt.Sprintf("MaxReservedFraction(%v)", o.limitFraction)
	}
	return fmt.Sprintf("MaxReserved(%d)", o.limit)
}

// MaxReserved caps the bytes the pool reserves from its source. Growth
// moves memory before it passes the cap; allocations that would need more
// fail with ErrOutOfMemory after the cache is released. (A scope's
// gpu.Limit, by contrast, caps the bytes a scope has live.) The pool
// reserves whole pages: the source's granularity where it maps pages, and
// at least a segment of 2 MiB where not; New refuses a cap below one page,
// under which no allocation could fit, as it does one given twice.
func MaxReserved(bytes int64) Option {
	return optionFunc(func(o *options) {
		o.once("MaxReserved", fmt.Sprintf("MaxReserved(%d)", bytes))
		if bytes <= 0 {
			o.errs = append(o.errs, prefixed.Kind("pool", ErrInvalidSize, "MaxReserved(%d): must be positive", bytes))
		}
		o.limit = bytes
	})
}

// MaxReservedFraction caps reserved bytes at a fraction in (0, 1] of the device's
// total memory, read once from the source's MemInfo when the pool is made.
func MaxReservedFraction(f float64) Option {
	return optionFunc(func(o *options) {
		o.once("MaxReservedFraction", fmt.Sprintf("MaxReservedFraction(%v)", f))
		if !(f > 0 && f <= 1) {
			o.errs = append(o.errs, prefixed.Kind("pool", ErrInvalidSize, "MaxReservedFraction(%v): must be in (0, 1]", f))
		}
		o.limitFraction = f
	})
}

// ReleaseThreshold makes the pool return memory to the source after a free
// whenever it caches more than bytes (reserved minus allocated). The default
// keeps everything, as PyTorch does; 0 releases at every free that leaves a
// whole segment or page unused, at the cost of driver calls.
func ReleaseThreshold(bytes int64) Option {
	return optionFunc(func(o *options) {
		o.once("ReleaseThreshold", fmt.Sprintf("ReleaseThreshold(%d)", bytes))
		if bytes < 0 {
			o.errs = append(o.errs, prefixed.Kind("pool", ErrInvalidSize, "ReleaseThreshold(%d): must not be negative", bytes))
		}
		o.releaseThreshold = bytes
	})
}

// MaxSplitSize stops the pool from splitting cached blocks of at least bytes
// for smaller requests, so huge blocks are not shredded by small ones (PyTorch's
// max_split_size_mb). Requests of at least bytes take such a block only if it
// wastes less than 20 MiB. It applies to classic segments: with a source
// that maps pages, use it with Expand(ExpandNever), or New reports an error.
func MaxSplitSize(bytes int64) Option {
	return optionFunc(func(o *options) {
		o.once("MaxSplitSize", fmt.Sprintf("MaxSplitSize(%d)", bytes))
		if bytes <= midSegment {
			o.errs = append(o.errs, prefixed.Kind("pool", ErrInvalidSize, "MaxSplitSize(%d): must be larger than %d", bytes, midSegment))
		}
		o.maxSplit = bytes
	})
}

// Expand chooses how arenas grow; see [Expansion].
func Expand(e Expansion) Option {
	return optionFunc(func(o *options) {
		o.once("Expand", fmt.Sprintf("Expand(%d)", e))
		if e < ExpandAuto || e > ExpandAlways {
			o.errs = append(o.errs, prefixed.Errorf("pool", "Expand(%d): unknown expansion", e))
		}
		o.expansion = e
	})
}

// Shards sets the number of front-cache shards. The default is twice
// GOMAXPROCS; 1 gives one shared cache.
func Shards(n int) Option {
	return optionFunc(func(o *options) {
		o.once("Shards", fmt.Sprintf("Shards(%d)", n))
		if n < 1 || n > 1024 {
			o.errs = append(o.errs, prefixed.Kind("pool", ErrInvalidSize, "Shards(%d): must be in [1, 1024]", n))
		}
		o.shards = n
	})
}

// DefaultGrowthStep is the [GrowthStep] of a pool made without one.
const DefaultGrowthStep = 10 << 20

// GrowthStep makes expandable arenas of large blocks grow by whole multiples
// of bytes (New rounds it up to the source's granularity): fewer, larger
// growths, and so fewer driver calls, for more memory reserved ahead of need.
// Where two steps are within what one handle may strand (1/256 of the cap,
// or of the device's memory where there is no cap; unbounded where neither
// is known), a request smaller than the step grows the arena by room for
// the next of its size too, so that it fits in the same growth; where the
// growth extends the mapped memory before a hole, it ends on a line of
// PyTorch's 20 MiB pages (or of the step, where larger) counted from the
// arena's start, so that a run of such requests reserves what PyTorch's
// expandable segments would.
// 0 grows by exactly what a request lacks, rounded to the granularity; the
// default is [DefaultGrowthStep]; PyTorch's expandable segments grow by
// 20 MiB. docs/measurements.md ("GrowthStep") shows the trade-off on real
// traces. Small blocks grow a granule at a time.
func GrowthStep(bytes int64) Option {
	return optionFunc(func(o *options) {
		o.once("GrowthStep", fmt.Sprintf("GrowthStep(%d)", bytes))
		if bytes < 0 || bytes > MaxSize {
			o.errs = append(o.errs, prefixed.Kind("pool", ErrInvalidSize, "GrowthStep(%d): must be in [0, MaxSize]", bytes))
		}
		o.growthStep = bytes
	})
}
