package gputest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
	"github.com/gpuscope/gpuscope/internal/registry"
	"github.com/gpuscope/gpuscope/pool"
)

func TestAnOpenScopeAndItsBufferAreReported(t *testing.T) {
	dev := openHost(t)
	gpu.RecordStacks(true)
	defer gpu.RecordStacks(false)
	s, err := dev.NewScope(gpu.Name("request"))
	require.NoError(t, err)
	_, err = s.Alloc(4096)
	require.NoError(t, err)

	ft := &fakeT{}
	gputest.VerifyNone(ft, fast())
	require.Len(t, ft.errs, 1)
	msg := ft.errs[0]
	assert.Contains(t, msg, "1 scope open, 1 buffer (4.00 KiB) live")
	assert.Contains(t, msg, `[Scope "request" open on device host`)
	assert.Contains(t, msg, `[Buffer of 4.00 KiB at 0x`)
	assert.Contains(t, msg, "gputest_test.TestAnOpenScopeAndItsBufferAreReported", "the allocation site")
	assert.Contains(t, msg, "leaks_test.go:", "with file and line")

	require.NoError(t, s.Close())
	ft = &fakeT{}
	gputest.VerifyNone(ft, fast())
	assert.Empty(t, ft.errs, "after closing nothing is reported")
}

func TestIgnoreCurrentHidesWhatExistedBefore(t *testing.T) {
	dev := openHost(t)
	weights, err := dev.NewScope(gpu.Name("weights"))
	require.NoError(t, err)
	defer weights.Close()
	_, err = weights.Alloc(1 << 20)
	require.NoError(t, err)

	ignore := gputest.IgnoreCurrent()
	ft := &fakeT{}
	gputest.VerifyNone(ft, ignore, fast())
	assert.Empty(t, ft.errs)

	b, err := weights.Alloc(64)
	require.NoError(t, err)
	gputest.VerifyNone(ft, ignore, fast())
	require.Len(t, ft.errs, 1, "a new buffer in an old scope is a leak")
	assert.Contains(t, ft.errs[0], "64 B")
	require.NoError(t, weights.Free(b))

	assert.NoError(t, gputest.Find(gputest.IgnoreScope("weights"), fast()))
	assert.NoError(t, gputest.Find(gputest.Devices("cuda:7"), fast()), "other devices only")
	assert.Error(t, gputest.Find(gputest.Devices("host"), fast()))
}

func TestStreamsAndPageLockedMemoryLeakedIntoAnInheritedScopeAreReported(t *testing.T) {
	dev := openHost(t)
	gpu.RecordStacks(true)
	defer gpu.RecordStacks(false)
	server, err := dev.NewScope(gpu.Name("server"))
	require.NoError(t, err)
	defer server.Close()
	_, err = server.NewStream()
	require.NoError(t, err)
	ignore := gputest.IgnoreCurrent()
	ft := &fakeT{}
	gputest.VerifyNone(ft, ignore, fast())
	require.Empty(t, ft.errs, "what the test inherits is not its leak")

	// The test's leaks: 64 MiB of page-locked memory and 8 streams.
	_, err = gpu.AllocHost[byte](server, 64<<20)
	require.NoError(t, err)
	for range 8 {
		_, err := server.NewStream()
		require.NoError(t, err)
	}
	gputest.VerifyNone(ft, ignore, fast())
	require.Len(t, ft.errs, 1)
	msg := ft.errs[0]
	assert.Contains(t, msg, "9 streams, events, modules or page-locked allocations")
	assert.Contains(t, msg, `[Page-locked memory of 64.00 MiB in scope "server" on device host:0]`)
	assert.Equal(t, 8, strings.Count(msg, `[Stream in scope "server"`), "not the inherited one")
	assert.Contains(t, msg, "TestStreamsAndPageLockedMemoryLeakedIntoAnInheritedScopeAreReported", "with the stack that made them")
}

func TestNoFalsePositiveWhileAFreeIsInFlight(t *testing.T) {
	dev := openHost(t)
	s, err := dev.NewScope(gpu.Name("closing"))
	require.NoError(t, err)
	_, err = s.Alloc(4096)
	require.NoError(t, err)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		<-inFlight
		_ = s.Close()
	}()
	err = gputest.Find(fast(), gputest.OnRetry(func(attempt int) {
		if attempt == 0 {
			inFlight <- struct{}{} // the free lands while the check retries
			<-closed
		}
	}))
	assert.NoError(t, err)
}

// closeWithAScopeOpen closes a host device with a scope "forgotten" open,
// as a test whose "defer dev.Close()" runs before "defer
// gputest.VerifyNone(t)" does.
func closeWithAScopeOpen(t *testing.T) {
	t.Helper()
	dev, err := gpu.OpenHost()
	require.NoError(t, err)
	s, err := dev.NewScope(gpu.Name("forgotten"))
	require.NoError(t, err)
	_, err = s.Alloc(4096)
	require.NoError(t, err)
	assert.Error(t, dev.Close())
}

func TestADeviceClosedWithScopesOpenIsALeak(t *testing.T) {
	gpu.RecordStacks(true)
	defer gpu.RecordStacks(false)
	closeWithAScopeOpen(t)
	ft := &fakeT{}
	gputest.VerifyNone(ft, fast())
	require.Len(t, ft.errs, 1, "the memory went back with Close; the leak is still reported")
	assert.Contains(t, ft.errs[0], "1 scope left open, ended by Device.Close with 1 buffer (4.00 KiB)\n")
	assert.Contains(t, ft.errs[0], `[Scope "forgotten" on device host:0 left open, opened by TestADeviceClosedWithScopesOpenIsALeak, ended by Device.Close with 4.00 KiB in use]`,
		"the test, not the helper that opened the scope for it")
	assert.NotContains(t, ft.errs[0], " live", "nothing is live after Close")
	assert.Contains(t, ft.errs[0], "[Buffer of 4.00 KiB")
	ft = &fakeT{}
	gputest.VerifyNone(ft, fast())
	assert.Empty(t, ft.errs, "reported once")
}

// The scene of a leak in a test suite: test A leaks a scope, its check
// reports it, its cleanup closes the device; test B, on a device of its
// own, leaks nothing and passes.
func TestALeakFailsTheTestThatLeakedItAndNoLaterOne(t *testing.T) {
	gpu.RecordStacks(true)
	defer gpu.RecordStacks(false)
	testA := &fakeT{}
	func() {
		dev, err := gpu.OpenHost()
		require.NoError(t, err)
		defer func() { _ = dev.Close() }() // runs after the check, as a t.Cleanup would
		s, err := dev.NewScope(gpu.Name("forgotten"))
		require.NoError(t, err)
		_, err = s.Alloc(4096)
		require.NoError(t, err)
		gputest.VerifyNone(testA, fast())
	}()
	require.Len(t, testA.errs, 1)
	assert.Contains(t, testA.errs[0], `[Scope "forgotten" open on device host:0, opened by TestALeakFailsTheTestThatLeakedItAndNoLaterOne, 4.00 KiB live]`,
		"the report names the test that opened the scope")

	testB := &fakeT{}
	func() {
		dev, err := gpu.OpenHost()
		require.NoError(t, err)
		defer func() { _ = dev.Close() }()
		err = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			_, err := s.Alloc(4096)
			return err
		})
		require.NoError(t, err)
		gputest.VerifyNone(testB, fast())
	}()
	assert.Empty(t, testB.errs, "test A's leak, reported and then ended by Close, is not test B's")
	assert.NoError(t, gputest.Find(fast()), "nor anyone's after")
}

func TestAReportedScopeStillOpenIsReportedAgainOnlyForWhatIsNew(t *testing.T) {
	dev := openHost(t)
	s, err := dev.NewScope(gpu.Name("kept"))
	require.NoError(t, err)
	_, err = s.Alloc(4096)
	require.NoError(t, err)
	ft := &fakeT{}
	gputest.VerifyNone(ft, fast())
	require.Len(t, ft.errs, 1)

	ft = &fakeT{}
	gputest.VerifyNone(ft, fast())
	assert.Empty(t, ft.errs, "reported once")

	b, err := s.Alloc(64)
	require.NoError(t, err)
	gputest.VerifyNone(ft, fast())
	require.Len(t, ft.errs, 1, "a buffer allocated since is new")
	assert.Contains(t, ft.errs[0], "1 scope open, 1 buffer (64 B) live")
	require.NoError(t, s.Free(b))
	require.NoError(t, s.Close())
}

func TestACheckOfSomeDevicesLeavesTheOthersReports(t *testing.T) {
	closeWithAScopeOpen(t)
	ft := &fakeT{}
	gputest.VerifyNone(ft, fast(), gputest.Devices("cuda:0"))
	assert.Empty(t, ft.errs, "not a leak of cuda:0")
	gputest.VerifyNone(ft, fast(), gputest.Devices("host"))
	require.Len(t, ft.errs, 1, "the host device's check still sees it")
	assert.Contains(t, ft.errs[0], `[Scope "forgotten" on device host:0 left open, ended by Device.Close`)
}

func TestIgnoreCurrentDoesNotIgnoreANewBufferAtAnOldAddress(t *testing.T) {
	dev := openHost(t)
	s, err := dev.NewScope(gpu.Name("inherited"))
	require.NoError(t, err)
	defer s.Close()
	old, err := s.Alloc(4096)
	require.NoError(t, err)
	ignore := gputest.IgnoreCurrent()
	oldPtr := old.Ptr()
	require.NoError(t, s.Free(old))
	fresh, err := s.Alloc(4096)
	require.NoError(t, err)
	require.Equal(t, oldPtr, fresh.Ptr(), "the pool hands the same address out again")
	ft := &fakeT{}
	gputest.VerifyNone(ft, fast(), ignore)
	require.Len(t, ft.errs, 1, "the new buffer is a leak, whatever its address")
	assert.Contains(t, ft.errs[0], "1 buffer (4.00 KiB) live")
	require.NoError(t, s.Free(fresh))
}

// A device records the release errors no caller could hear (gpu's
// TestReleaseErrorsOfAPanickingScopeAreReported shows it); this checks
// that gputest reports what is recorded.
func TestReleaseErrorsNoCallerHeardFailTheCheck(t *testing.T) {
	registry.RecordDroppedError("host", errors.New("gpu: releasing 4.00 MiB: injected failure"))
	ft := &fakeT{}
	gputest.VerifyNone(ft, fast())
	require.Len(t, ft.errs, 1)
	assert.Contains(t, ft.errs[0], "releasing memory failed where no caller could hear it")
	assert.Contains(t, ft.errs[0], "injected failure")
	ft = &fakeT{}
	gputest.VerifyNone(ft, fast())
	assert.Empty(t, ft.errs, "an error is reported once")
}

// A check restricted to some devices takes only their dropped release
// errors: another device's stay for that device's own check.
func TestACheckOfOneDeviceLeavesAnotherDevicesReleaseErrors(t *testing.T) {
	dev, faults := openFaulty(t, gpu.PoolOptions(pool.ReleaseThreshold(0)))
	faults.FailNth(gputest.OpFree, 1) // giving the memory back at the scope's end fails
	require.Panics(t, func() {
		_ = gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
			_, err := s.Alloc(4 << 20)
			require.NoError(t, err)
			panic("boom") // so no caller hears the release error
		})
	})
	ft := &fakeT{}
	gputest.VerifyNone(ft, fast(), gputest.Devices("cuda:0"))
	assert.Empty(t, ft.errs, "the host device's error is not cuda:0's")
	gputest.VerifyNone(ft, fast(), gputest.Devices("host"))
	require.Len(t, ft.errs, 1, "and the host device's check sees it")
	assert.Contains(t, ft.errs[0], "releasing memory failed where no caller could hear it")
	assert.Contains(t, ft.errs[0], "injected fault: Release")
	require.NoError(t, dev.EmptyCache())
}

func TestTheOpeningTestIsTheOutermostTestFunctionOnTheStack(t *testing.T) {
	for _, c := range []struct {
		frames []string
		test   string
	}{
		{[]string{"example.com/app.open /src/app/open.go:3", "example.com/app_test.helper /src/app/a_test.go:9",
			"example.com/app_test.TestDecode.func1 /src/app/a_test.go:20", "example.com/app_test.TestDecode /src/app/a_test.go:25",
			"testing.tRunner /go/src/testing/testing.go:1"}, "TestDecode"},
		{[]string{"example.com/app_test.BenchmarkX /src/app/b_test.go:4"}, "BenchmarkX"},
		{[]string{"example.com/app_test.Test /src/app/b_test.go:4"}, "Test"},
		{[]string{"example.com/app_test.Testing /src/app/b_test.go:4"}, ""}, // not a test: go test's rule
		{[]string{"example.com/app.TestLike /src/app/app.go:4"}, ""},        // not in a test file
		{nil, ""},
	} {
		assert.Equal(t, c.test, gputest.OpeningTest(c.frames), "%q", c.frames)
	}
}

// A device a test opened and never closed holds its pool's memory: the
// check of a later test reports it, once, naming the test that opened it.
// The check of the test that opened it does not, since its t.Cleanup may
// still close it; nor does any check report a device that a scope ignored
// by name holds open on purpose, or one open at IgnoreCurrent.
func TestADeviceATestNeverClosedIsReportedByTheNextCheck(t *testing.T) {
	dev, err := gpu.OpenHost(gpu.HostMemory(8 << 20))
	require.NoError(t, err)
	defer func() { require.NoError(t, dev.Close()) }()
	require.NoError(t, gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(1 << 20)
		return err
	}))
	require.NoError(t, gputest.Find(fast()), "this test's check: its cleanup may close the device")
	ignore := gputest.IgnoreCurrent()
	require.NoError(t, gputest.FindAfter("TestLater", fast(), ignore), "open at IgnoreCurrent")

	err = gputest.FindAfter("TestLater", fast())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "found unexpected GPU memory: 1 device never closed, 2.00 MiB reserved\n")
	assert.Contains(t, err.Error(), "[Device "+dev.Name()+" open, never closed, opened by TestADeviceATestNeverClosedIsReportedByTheNextCheck: "+
		"2.00 MiB reserved, 0 B allocated; Device.Close gives it back]\n  opened at:\n    github.com/gpuscope/gpuscope/gpu/gputest_test.TestADeviceATestNeverClosedIsReportedByTheNextCheck\n")
	assert.NoError(t, gputest.FindAfter("TestLater", fast()), "reported once")
}

func TestADeviceAnIgnoredScopeHoldsIsOpenOnPurpose(t *testing.T) {
	dev, err := gpu.OpenHost(gpu.HostMemory(8 << 20))
	require.NoError(t, err)
	defer func() { require.NoError(t, dev.Close()) }()
	weights, err := dev.NewScope(gpu.Name("weights"))
	require.NoError(t, err)
	defer weights.Close()
	assert.NoError(t, gputest.FindAfter("TestLater", fast(), gputest.IgnoreScope("weights")))
	assert.ErrorContains(t, gputest.FindAfter("TestLater", fast()), "1 device never closed")
}

// A device whose test is still running is not reported by another test's
// check: that test may yet close it. This test is on the stack, as a test
// paused at t.Parallel is.
func TestADeviceOfATestStillRunningIsNotReported(t *testing.T) {
	dev, err := gpu.OpenHost(gpu.HostMemory(8 << 20))
	require.NoError(t, err)
	defer func() { require.NoError(t, dev.Close()) }()
	assert.NoError(t, gputest.FindAs("TestLater", fast()), "the test that opened it runs")
	assert.ErrorContains(t, gputest.FindAfter("TestLater", fast()), "1 device never closed", "once it has ended")
}

// helperScenario names, in the environment of a child process of the test
// binary, the scenario the helper tests below play; they skip without it.
const helperScenario = "GPUTEST_HELPER_SCENARIO"

// As go test runs them: a sequential test checks while a test that opened
// a device waits at t.Parallel; a helper's t.Cleanup checks before the
// helper's other cleanup closes the device; and, to show the check runs, a
// later test checks after a test that never closed its device.
func TestTheChecksOfTestsAsGoTestRunsThem(t *testing.T) {
	for _, c := range []struct {
		scenario, tests, fails string
	}{
		{"parallel", "TestHelperOpensThenWaitsAtParallel|TestHelperChecksMeanwhile", ""},
		{"cleanup", "TestHelperChecksInAHelpersCleanup", ""},
		{"never", "TestHelperNeverCloses|TestHelperChecksLater", "1 device never closed"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^("+c.tests+")$", "-test.count=1")
		cmd.Env = append(os.Environ(), helperScenario+"="+c.scenario)
		out, err := cmd.CombinedOutput()
		if c.fails == "" {
			assert.NoError(t, err, "%s:\n%s", c.scenario, out)
		} else {
			assert.Error(t, err, "%s:\n%s", c.scenario, out)
			assert.Contains(t, string(out), c.fails, c.scenario)
		}
	}
}

func helperFor(t *testing.T, scenario string) {
	if os.Getenv(helperScenario) != scenario {
		t.Skip("a helper of TestTheChecksOfTestsAsGoTestRunsThem")
	}
}

func TestHelperOpensThenWaitsAtParallel(t *testing.T) {
	helperFor(t, "parallel")
	openHost(t)
	t.Parallel()
}

func TestHelperChecksMeanwhile(t *testing.T) {
	helperFor(t, "parallel")
	gputest.VerifyNone(t, fast())
}

func TestHelperChecksInAHelpersCleanup(t *testing.T) {
	helperFor(t, "cleanup")
	openChecked(t)
}

// openChecked opens a device that a cleanup closes, and checks in a
// cleanup that runs first, after the test's function has returned.
func openChecked(t *testing.T) *gpu.Device {
	dev := openHost(t)
	t.Cleanup(func() { gputest.VerifyNone(t, fast()) })
	return dev
}

func TestHelperNeverCloses(t *testing.T) {
	helperFor(t, "never")
	_, err := gpu.OpenHost(gpu.HostMemory(8 << 20))
	require.NoError(t, err)
}

func TestHelperChecksLater(t *testing.T) {
	helperFor(t, "never")
	gputest.VerifyNone(t, fast())
}
