// Package handles numbers the objects a driver hands out (streams, events,
// modules, page handles): the handles its callers pass back. A driver keeps
// each kind of object in a map from handle to object, guarded by its own
// lock, and may number several kinds from one counter, so that no two of
// its objects share a handle.
package handles

// Add stores v in m under the handle after *last, which it makes the last,
// and returns the handle.
func Add[K ~uintptr | ~uint64, V any](m map[K]V, last *K, v V) K {
	*last++
	m[*last] = v
	return *last
}

// Take removes the object of handle h from m and returns it; ok is false
// where m has none. Handle 0 is never taken: it stands for a default
// object (a driver's default stream), which lives as long as the driver.
func Take[K comparable, V any](m map[K]V, h K) (v V, ok bool) {
	var def K
	if h == def {
		return v, false
	}
	if v, ok = m[h]; ok {
		delete(m, h)
	}
	return v, ok
}
