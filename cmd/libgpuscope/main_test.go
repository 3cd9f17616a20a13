package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(removeLibrary{m})
}

// removeLibrary removes the library the tests built once they are done.
type removeLibrary struct{ m *testing.M }

func (r removeLibrary) Run() int {
	defer func() {
		if library.dir != "" {
			_ = os.RemoveAll(library.dir)
		}
	}()
	return r.m.Run()
}
