// Package gputest checks, as go.uber.org/goleak does for goroutines, that
// tests leave no GPU memory behind: no scope still open and no buffer still
// live, on any device open in the process, and no device a test opened
// and never closed.
//
//	func TestMain(m *testing.M) {
//		gputest.VerifyTestMain(m)
//	}
//
//	func TestDecode(t *testing.T) {
//		defer gputest.VerifyNone(t)
//		...
//	}
//
// With goleak too: goleak.VerifyTestMain(gputest.Wrap(m)).
//
// Like goleak, VerifyNone sees the whole process: it does not work with
// t.Parallel, since other tests' scopes are open while it looks. A leak is
// reported once: the test that made it fails, not every test after it.
//
// [OpenFaulty] opens a host-memory device whose driver calls, and whose
// scopes' allocations ([OpRequest]), a test can make fail, and whose
// streams it can hold busy, as net/http/httptest gives
// a server to test against: a test's way to see what a program does when
// the GPU misbehaves.
package gputest
