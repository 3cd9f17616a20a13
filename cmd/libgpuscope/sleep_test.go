package main

import "testing"

// TestScopesSleepFromC runs testdata/sleep.c against the shared library: a
// scope begun sleepable from C, put to sleep with and without its contents,
// its memory taken by another scope meanwhile, woken, and ended.
func TestScopesSleepFromC(t *testing.T) { runC(t, "sleep") }
