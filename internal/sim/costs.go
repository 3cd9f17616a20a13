package sim

import (
	"slices"
	"time"
)

// The kinds of driver call a pool makes, as gpumem replay counts them. Each
// is one call of the CUDA driver API, except record_event, which creates an
// event and records it (cuEventCreate + cuEventRecord).
const (
	CallAlloc          = "alloc"           // cuMemAlloc
	CallFree           = "free"            // cuMemFree
	CallReserveAddress = "reserve_address" // cuMemAddressReserve
	CallReleaseAddress = "release_address" // cuMemAddressFree
	CallCreate         = "create"          // cuMemCreate
	CallRelease        = "release"         // cuMemRelease
	CallMap            = "map"             // cuMemMap
	CallSetAccess      = "set_access"      // cuMemSetAccess
	CallUnmap          = "unmap"           // cuMemUnmap
	CallRecordEvent    = "record_event"    // cuEventCreate + cuEventRecord
	CallEventQuery     = "event_query"     // cuEventQuery
	CallWaitEvent      = "wait_event"      // cuEventSynchronize
	CallDestroyEvent   = "destroy_event"   // cuEventDestroy
)

// PriceSetAccessExtraHandle is no call: it prices what each handle beyond
// the first adds to one cuMemSetAccess over a range of several handles.
// The driver's work grows with the handles in the range, not the bytes.
const PriceSetAccessExtraHandle = "set_access_extra_handle"

// PriceCreateAfterRelease is no call: it prices what the next cuMemCreate
// waits for each handle released since the create before it, by that
// handle's size. The driver finishes a release's work lazily and the next
// create waits for all of it, so the waits of several releases add up.
const PriceCreateAfterRelease = "create_after_release"

// CostPoint is the measured time of one call on size bytes.
type CostPoint struct {
	Size int64
	Time time.Duration
}

// CostTable models what driver calls cost: for each kind, times measured at
// some sizes, in increasing size. A call between two sizes costs the linear
// interpolation; beyond the ends, the nearest end.
type CostTable map[string][]CostPoint

// Cost returns the modelled time of one call of kind on size bytes, and
// false for a kind the table does not know.
func (t CostTable) Cost(kind string, size int64) (time.Duration, bool) {
	pts := t[kind]
	if len(pts) == 0 {
		return 0, false
	}
	i, _ := slices.BinarySearchFunc(pts, size, func(p CostPoint, s int64) int {
		switch {
		case p.Size < s:
			return -1
		case p.Size > s:
			return 1
		}
		return 0
	})
	switch {
	case i == 0:
		return pts[0].Time, true
	case i == len(pts):
		return pts[len(pts)-1].Time, true
	}
	lo, hi := pts[i-1], pts[i]
	f := float64(size-lo.Size) / float64(hi.Size-lo.Size)
	return lo.Time + time.Duration(f*float64(hi.Time-lo.Time)), true
}

const (
	ns  = time.Nanosecond
	mib = 1 << 20
	gib = 1 << 30
)

// H200 is what each driver call cost on one NVIDIA H200 (driver 580, CUDA
// 13), from one thread, through gpu/cuda with its cgo: BenchmarkDriverCalls,
// the median of five runs of 200 calls. docs/pool.md ("The model of driver
// time") links the run and says how well the model follows the replays.
var H200 = CostTable{
	// cuMemAlloc and cuMemFree, for classic segments: not in that run;
	// docs/pool.md says where they come from.
	CallAlloc: {{256, 5100 * ns}, {1 * mib, 29700 * ns}, {64 * mib, 66800 * ns}, {1 * gib, 140800 * ns}},
	CallFree:  {{256, 3800 * ns}, {1 * mib, 24800 * ns}, {64 * mib, 93100 * ns}, {1 * gib, 624600 * ns}},
	// For 512 MiB the creates that did not wait for a release (57 and
	// 82 us): the others, each after the release of the one before, took
	// 0.93 to 1.05 ms, waiting for that release (PriceCreateAfterRelease
	// prices the wait).
	CallCreate:    {{2 * mib, 13645 * ns}, {20 * mib, 18077 * ns}, {64 * mib, 15837 * ns}, {512 * mib, 69469 * ns}},
	CallMap:       {{2 * mib, 2477 * ns}, {20 * mib, 2117 * ns}, {64 * mib, 2525 * ns}, {512 * mib, 2313 * ns}},
	CallSetAccess: {{2 * mib, 45938 * ns}, {20 * mib, 48309 * ns}, {64 * mib, 47940 * ns}, {512 * mib, 59382 * ns}},
	CallUnmap:     {{2 * mib, 27288 * ns}, {20 * mib, 27572 * ns}, {64 * mib, 24264 * ns}, {512 * mib, 30331 * ns}},
	// Each handle after the first in one set-access range: fitted to a
	// replay's access calls over many handles (docs/pool.md).
	PriceSetAccessExtraHandle: {{0, 30000 * ns}},
	// The wait of a create for each handle released since the create
	// before, by the released size: none up to 256 MiB, and from 512 MiB
	// the mean wait measured after such releases (docs/pool.md, "The model
	// of driver time", gives the measurements and why it goes by size).
	PriceCreateAfterRelease: {{64 * mib, 0}, {256 * mib, 0}, {512 * mib, 548442 * ns}},
	CallRelease:             {{2 * mib, 13883 * ns}, {20 * mib, 19973 * ns}, {64 * mib, 47852 * ns}, {512 * mib, 245938 * ns}},
	CallReserveAddress:      {{256 * gib, 3238 * ns}},
	// cuMemAddressFree: not measured; taken as a reservation's cost.
	CallReleaseAddress: {{256 * gib, 3238 * ns}},
	CallRecordEvent:    {{0, 1845 * ns}},
	CallEventQuery:     {{0, 665 * ns}},
	CallWaitEvent:      {{0, 631 * ns}},
	CallDestroyEvent:   {{0, 1005 * ns}},
}
