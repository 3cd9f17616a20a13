package pool

// Internals reached by the external tests.

func (p *Pool) CheckInvariants(mapped func(ptr uintptr, n int64) bool) error {
	return p.checkInvariants(mapped)
}

func (p *Pool) CheckTrimmed() error { return p.checkTrimmed() }
