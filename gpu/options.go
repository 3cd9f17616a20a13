package gpu

import (
	"strings"

	"github.com/gpuscope/gpuscope/gpu/internal/host"
	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/pool"
)

// A DeviceOption configures a device when it opens.
//
// Options take and return the options by value, as ScopeOptions do.
type DeviceOption interface {
	applyDevice(deviceOptions) deviceOptions
}

type deviceOptions struct {
	hostMemory    int64
	pool          []pool.Option
	releaseErrors func(error)
	onOOM         func(error)
	scrub         bool
	optionErrors
}

type deviceOptionFunc func(deviceOptions) deviceOptions

func (f deviceOptionFunc) applyDevice(o deviceOptions) deviceOptions { return f(o) }

// HostMemory sets the capacity of a host-memory device ([OpenHost]): at
// least one page of 2 MiB, the host device's page and the least the pool
// takes. It means nothing to [Open] and [OpenDriver], which report it as
// an error.
func HostMemory(bytes int64) DeviceOption {
	return deviceOptionFunc(func(o deviceOptions) deviceOptions {
		o.once(givenHostMemory, "HostMemory")
		switch {
		case bytes <= 0:
			o.errs = append(o.errs, prefixed.Kind("gpu", ErrInvalidSize, "HostMemory(%d): must be positive", bytes))
		case bytes < host.PageSize:
			// The pool takes memory a page at a time: on a smaller device
			// no allocation could ever succeed.
			o.errs = append(o.errs, prefixed.Kind("gpu", ErrInvalidSize, "HostMemory(%d): at least %s, the host device's page", bytes, Bytes(host.PageSize)))
		}
		o.hostMemory = bytes
		return o
	})
}

// MaxReserved caps the bytes the device's pool reserves from the driver,
// from the start; [Device.SetMaxReserved] changes the cap while the
// program runs. 0 means no cap. The pool reserves whole pages (2 MiB on
// the host device and on most GPUs): a cap below one page, under which no
// allocation could fit, and a negative one are ErrInvalidSize, which the
// device's Open returns. An allocation the cap refuses fails with an
// [*OOMError] that says so first.
func MaxReserved(bytes int64) DeviceOption {
	return deviceOptionFunc(func(o deviceOptions) deviceOptions {
		o.once(givenCap, "the cap (MaxReserved or MaxReservedFraction)")
		switch {
		case bytes < 0:
			o.errs = append(o.errs, prefixed.Kind("gpu", ErrInvalidSize, "MaxReserved(%d): the cap must not be negative (0: none)", bytes))
		case bytes > 0:
			o.pool = append(o.pool, pool.MaxReserved(bytes))
		}
		return o
	})
}

// MaxReservedFraction is [MaxReserved] as a fraction in (0, 1] of the
// device's memory; anything else (0, a negative number, NaN, more than 1)
// is ErrInvalidSize.
func MaxReservedFraction(f float64) DeviceOption {
	return deviceOptionFunc(func(o deviceOptions) deviceOptions {
		o.once(givenCap, "the cap (MaxReserved or MaxReservedFraction)")
		if !(f > 0 && f <= 1) {
			o.errs = append(o.errs, prefixed.Kind("gpu", ErrInvalidSize, "MaxReservedFraction(%v): a fraction of the device must be in (0, 1]", f))
			return o
		}
		o.pool = append(o.pool, pool.MaxReservedFraction(f))
		return o
	})
}

// PoolOptions passes options to the device's caching pool (limits, release
// threshold, expansion; see package pool). Each pool option may be given
// once, here or through this package's options of the same name
// (MaxReserved is pool.MaxReserved).
func PoolOptions(opts ...pool.Option) DeviceOption {
	return deviceOptionFunc(func(o deviceOptions) deviceOptions { o.pool = append(o.pool, opts...); return o })
}

// ScrubFreed makes the device zero every buffer's memory when it is freed,
// before it goes back to the cache: no later owner, in any scope, can read
// what an earlier one wrote. For multi-tenant servers; it costs a memset per
// free. The zeros are queued on the buffer's stream, after its work there;
// a buffer that other streams used is zeroed after their work too, which
// its free waits for.
func ScrubFreed() DeviceOption {
	return deviceOptionFunc(func(o deviceOptions) deviceOptions { o.once(givenScrub, "ScrubFreed"); o.scrub = true; return o })
}

// OnOutOfMemory is called with every out-of-memory error an allocation
// returns (it names the scopes holding the most), for logging or to act on
// it. Where the device has Evictable scopes it is called only after
// eviction could not make room: no idle evictable scope was left. It runs
// after the pool's locks are released, so it may call EmptyCache. It may be called from any goroutine, and for an allocation of
// a WaitForMemory scope at each attempt that finds no room.
func OnOutOfMemory(fn func(error)) DeviceOption {
	return errorCallback("OnOutOfMemory", givenOnOOM, fn, func(o *deviceOptions) *func(error) { return &o.onOOM })
}

// OnReleaseError is called with the errors of releasing a scope's memory
// that nobody else can hear: those of a WithScope whose function panicked,
// since the panic goes on with its own value. It may be called from any
// goroutine, after the scope's memory is released. Without it, the device
// keeps them for gputest, whose checks report them as failures.
func OnReleaseError(fn func(error)) DeviceOption {
	return errorCallback("OnReleaseError", givenOnRelease, fn, func(o *deviceOptions) *func(error) { return &o.releaseErrors })
}

// errorCallback is the option name(fn): it sets the callback that field
// points to to fn, and records an error for a nil fn.
func errorCallback(name string, bit given, fn func(error), field func(*deviceOptions) *func(error)) DeviceOption {
	return deviceOptionFunc(func(o deviceOptions) deviceOptions {
		o.once(bit, name)
		if fn == nil {
			o.errs = append(o.errs, prefixed.Errorf("gpu", "%s(nil)", name))
		}
		*field(&o) = fn
		return o
	})
}

func buildDeviceOptions(opts []DeviceOption) (deviceOptions, error) {
	return buildOptions(opts, DeviceOption.applyDevice, "nil DeviceOption")
}

// optionErrors are the errors the options given recorded, in order, and
// which options were given.
type optionErrors struct {
	errs  []error
	given given
}

// given is a set of options, a bit each: those that were given.
type given uint16

// The options that may be given once, a bit each. PoolOptions may be given
// more than once: the pool refuses a pool option given twice.
const (
	givenHostMemory given = 1 << iota
	givenCap              // MaxReserved or MaxReservedFraction
	givenScrub
	givenOnOOM
	givenOnRelease
	givenName
	givenReserve
	givenLimit
	givenZeroed
	givenWait
	givenStream
	givenEvictable
	givenSleepable
)

// once records that the option of bit, name, was given; a second time is
// an error. It formats nothing unless it fails: a scope's options are
// built at every WithScope.
func (e *optionErrors) once(bit given, name string) {
	if e.given&bit != 0 {
		e.errs = append(e.errs, prefixed.Errorf("gpu", "%s given twice: give each option once", name))
	}
	e.given |= bit
}

// first returns the first of the errors, or nil.
func (e optionErrors) first() error {
	if len(e.errs) > 0 {
		return e.errs[0]
	}
	return nil
}

// buildOptions applies opts in order to the zero options, and returns the
// first error: a nil option (nilOption says so), or one an option
// recorded.
func buildOptions[Opt any, O interface{ first() error }](opts []Opt, apply func(Opt, O) O, nilOption string) (O, error) {
	var o O
	for _, opt := range opts {
		if any(opt) == nil {
			return o, prefixed.Errorf("gpu", "%s", nilOption)
		}
		o = apply(opt, o)
	}
	return o, o.first()
}

// A ScopeOption configures a scope when it opens.
//
// Options take and return the options by value: a pointer passed through
// the interface would make every WithScope allocate them on the heap.
type ScopeOption interface {
	applyScope(scopeOptions) scopeOptions
}

type scopeOptions struct {
	stream  *Stream
	name    string
	reserve int64
	limit   int64
	zeroed  bool
	wait    bool
	// evictable and priority are Evictable's.
	evictable bool
	priority  int
	sleepable bool
	optionErrors
}

type scopeOptionFunc func(scopeOptions) scopeOptions

func (f scopeOptionFunc) applyScope(o scopeOptions) scopeOptions { return f(o) }

// Name names a scope for diagnostics: leak reports and errors show its path,
// the names of the scopes it is in and its own, joined by "/", such as
// "request/decode". A name is not empty and holds no "/", which would read
// as a scope inside another. A scope without Name is named after the
// function that opened it where stacks are recorded, else "scope#N".
func Name(name string) ScopeOption {
	return scopeOptionFunc(func(o scopeOptions) scopeOptions {
		o.once(givenName, "Name")
		switch {
		case name == "":
			o.errs = append(o.errs, prefixed.Errorf("gpu", `Name(""): a scope's name must not be empty; leave Name out for an unnamed scope`))
		case strings.Contains(name, "/"):
			o.errs = append(o.errs, prefixed.Errorf("gpu", `Name(%q): a scope's name must not hold "/", which joins the names of a path ("request/decode"); `+
				`open the scope inside another to nest it, or write another character (%q)`, name, strings.ReplaceAll(name, "/", "-")))
		}
		o.name = name
		return o
	})
}

// Reserve sets bytes aside for the scope and its children when it opens.
// They allocate from the nearest reservation with room, then from the pool.
func Reserve(bytes int64) ScopeOption {
	return scopeOptionFunc(func(o scopeOptions) scopeOptions {
		o.once(givenReserve, "Reserve")
		switch {
		case bytes <= 0:
			o.errs = append(o.errs, prefixed.Kind("gpu", ErrInvalidSize, "Reserve(%d): a reservation must be positive; leave Reserve out for none", bytes))
		case bytes > pool.MaxSize:
			o.errs = append(o.errs, prefixed.Kind("gpu", ErrInvalidSize, "Reserve(%d): more than any device holds (at most %d)", bytes, int64(pool.MaxSize)))
		}
		o.reserve = bytes
		return o
	})
}

// Limit caps the bytes the scope and its children take from the device:
// each allocation as the pool rounds it (a multiple of 512 bytes), and
// every reservation among them, the scope's own ([Reserve]) included. An
// allocation served from a reservation is not charged again: the
// reservation was. An allocation past the limit fails with an *OOMError
// (ErrOutOfMemory) whose cause is a *LimitError. docs/scopes.md has the
// rules in full. A limit below 512 bytes, under which the scope could
// hold nothing, is ErrInvalidSize, as is one of 0 or less.
func Limit(bytes int64) ScopeOption {
	return scopeOptionFunc(func(o scopeOptions) scopeOptions {
		o.once(givenLimit, "Limit")
		switch least := pool.Rounded(1); {
		case bytes <= 0:
			o.errs = append(o.errs, prefixed.Kind("gpu", ErrInvalidSize, "Limit(%d): a limit must be positive; leave Limit out for none", bytes))
		case bytes < least:
			o.errs = append(o.errs, prefixed.Kind("gpu", ErrInvalidSize, "Limit(%d): below %d bytes, the least an allocation takes "+
				"(the pool rounds each up to a multiple of %d), so the scope could hold nothing; give at least %d", bytes, least, least, least))
		}
		o.limit = bytes
		return o
	})
}

// Zeroed makes the allocations of the scope and of every scope opened inside
// it start zeroed, as decided when each is allocated. Without it an
// allocation is uninitialized, as cudaMalloc's is, and may hold bytes its
// memory's previous owner wrote: zeroing costs a memset per allocation.
// For a device shared by mutually untrusting users, see also [ScrubFreed].
func Zeroed() ScopeOption {
	return scopeOptionFunc(func(o scopeOptions) scopeOptions { o.once(givenZeroed, "Zeroed"); o.zeroed = true; return o })
}

// WaitForMemory makes the allocations of the scope and of every scope inside
// it wait when memory is short, instead of failing: an allocation that would
// fail with ErrOutOfMemory (the device's, or a limit's) waits until memory
// is released on the device and tries again, first come first served, until
// the scope's context is done. This is back-pressure for servers: requests
// queue for memory instead of failing. A request that can never fit
// (larger than the device, the pool's cap, or the Limit of the scope or of
// an enclosing one) fails at once with its [*OOMError]. A wait that ends
// with the context fails with an error that names the scope and the size
// and matches both the context's error and ErrOutOfMemory (errors.As finds
// the last attempt's *OOMError).
func WaitForMemory() ScopeOption {
	return scopeOptionFunc(func(o scopeOptions) scopeOptions { o.once(givenWait, "WaitForMemory"); o.wait = true; return o })
}

// OnStream orders the scope's allocations, copies and frees on st, and its
// children's unless they name a stream of their own: memory a scope frees
// is reused at once for work on st, and on other streams only after st's
// work at the free has completed. Such a scope cannot Reserve (a
// reservation is memory of one stream its children share), nor can the
// scopes inside it that inherit its stream, and it draws only on
// reservations of scopes on the same stream.
func OnStream(st *Stream) ScopeOption {
	return scopeOptionFunc(func(o scopeOptions) scopeOptions {
		o.once(givenStream, "OnStream")
		if !st.valid() {
			o.errs = append(o.errs, prefixed.Wrap("gpu", errNilStream, "OnStream"))
		}
		o.stream = st
		return o
	})
}

// buildScopeOptions is buildOptions for a scope, which also refuses a
// Reserve over the scope's own Limit: with Reserve and Limit, the one
// place a scope's sizes are checked (package scope takes them as given).
func buildScopeOptions(opts []ScopeOption) (scopeOptions, error) {
	o, err := buildOptions(opts, ScopeOption.applyScope, "nil ScopeOption")
	if err == nil && o.limit > 0 && o.reserve > o.limit {
		err = prefixed.Kind("gpu", ErrInvalidSize, "Reserve(%d) exceeds the scope's Limit(%d)", o.reserve, o.limit)
	}
	return o, err
}
