package gpu

// HostClass is the size class of an AllocHost of size bytes and the
// class's size.
func HostClass(size int64) (int, int64) { return hostClass(size) }

// DeviceError is deviceError, for tests of how errors cross into gpu.
func DeviceError(err error) error { return deviceError(err) }
