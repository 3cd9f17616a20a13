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
// 13), one thread, through this project's driver, its cgo and context switch
// included: gpu/cuda's BenchmarkDriverCalls, the median of three runs of 200
// calls, docs/data/h200-2026-11-30-b/driver_calls.txt. Where that run has no
// figure, the table of shared/traces/README.md ("Driver costs measured on the
// same H200") gives it, and the comment says so.
var H200 = CostTable{
	// cuMemAlloc and cuMemFree: the README's table.
	CallAlloc: {{256, 5100 * ns}, {1 * mib, 29700 * ns}, {64 * mib, 66800 * ns}, {1 * gib, 140800 * ns}},
	CallFree:  {{256, 3800 * ns}, {1 * mib, 24800 * ns}, {64 * mib, 93100 * ns}, {1 * gib, 624600 * ns}},
	// For 512 MiB the first create of the run: later ones, each after the
	// release of the one before, took 400 to 980 us, waiting for that
	// release; the pool never releases while it grows.
	CallCreate:    {{2 * mib, 8600 * ns}, {20 * mib, 13580 * ns}, {64 * mib, 21570 * ns}, {512 * mib, 27600 * ns}},
	CallMap:       {{2 * mib, 1710 * ns}, {20 * mib, 1000 * ns}, {64 * mib, 1870 * ns}, {512 * mib, 990 * ns}},
	CallSetAccess: {{2 * mib, 35110 * ns}, {20 * mib, 33860 * ns}, {64 * mib, 46850 * ns}, {512 * mib, 57660 * ns}},
	CallUnmap:     {{2 * mib, 25730 * ns}, {20 * mib, 22920 * ns}, {64 * mib, 27690 * ns}, {512 * mib, 29490 * ns}},
	// Each handle after the first in one set-access range: resnet50_train
	// replayed on the H200 at its smallest cap made 145 access calls over
	// 688 mapped handles in 18.41 ms; less the first handle's 37 us each,
	// 24 us a handle (docs/data/h200-2026-12-01-pressure).
	PriceSetAccessExtraHandle: {{0, 24000 * ns}},
	CallRelease:               {{2 * mib, 12760 * ns}, {20 * mib, 16320 * ns}, {64 * mib, 30010 * ns}, {512 * mib, 228430 * ns}},
	CallReserveAddress:        {{256 * gib, 1660 * ns}},
	// cuMemAddressFree: not measured; taken as a reservation's cost.
	CallReleaseAddress: {{256 * gib, 1660 * ns}},
	CallRecordEvent:    {{0, 1720 * ns}},
	CallEventQuery:     {{0, 980 * ns}},
	CallWaitEvent:      {{0, 790 * ns}},
	CallDestroyEvent:   {{0, 900 * ns}},
}
