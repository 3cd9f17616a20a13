package gpu

import (
	"github.com/gpuscope/gpuscope/internal/units"
)

// Bytes is a number of bytes that prints itself for a person: 1536 prints
// as "1.50 KiB", in the largest binary unit that keeps it at or above 1.
type Bytes int64

// String formats b, as %v and Println use it.
func (b Bytes) String() string { return units.FormatBytes(int64(b)) }
