package host

// OpenDrivers reports the drivers New returned that are not closed yet.
func OpenDrivers() int64 { return openDrivers.Load() }
