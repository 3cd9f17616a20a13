package callers_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/internal/callers"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A context without names is Go's; one with names gives them, as they
// are when asked, to the contexts made from it.
func TestAContextCarriesItsCallersNames(t *testing.T) {
	assert.Equal(t, "Device.SetMaxReserved", callers.From(context.Background()).SetMaxReserved)
	names := callers.Names{SetMaxReserved: "gpuscope_set_max_reserved"}
	ctx, cancel := context.WithCancel(callers.With(context.Background(), func() callers.Names { return names }))
	defer cancel()
	assert.Equal(t, names, callers.From(ctx))
	names.SetMaxReserved = "gpuscope.set_max_reserved"
	assert.Equal(t, "gpuscope.set_max_reserved", callers.From(ctx).SetMaxReserved)
}
