// Package sample is what apitest's test lists.
package sample

// Limit is exported.
const Limit = 1

var hidden = 2

// T is exported, with a constructor, a method and fields.
type T struct {
	Name  string // exported
	count int
}

// Pair embeds T.
type Pair struct {
	*T
	Left, Right int
	hidden      bool
}

// New returns a T.
func New() T { return T{} }

// Do is exported.
func (T) Do() {}

func (T) undo() {}

type t2 struct{}

// Exported of an unexported type is not listed.
func (t2) Exported() {}
