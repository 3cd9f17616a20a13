package scope

import (
	"context"

	"github.com/gpuscope/gpuscope/internal/poolentry"
	"github.com/gpuscope/gpuscope/pool"
)

// allocRounded allocates from the pool the rounded bytes (pool.Rounded of
// size) that a scope charged for a size gpu checked: the pool neither checks
// nor rounds it again. Package pool sets it before this package's variables
// are initialized, since scope imports pool.
var allocRounded = poolentry.AllocRounded.(func(p *pool.Pool, ctx context.Context, rounded, size int64, stream uintptr) (pool.Block, error))
