package main

import (
	"testing"

	"github.com/gpuscope/gpuscope/examples/internal/demotest"
)

func TestMain(m *testing.M) { demotest.Main(m) }
