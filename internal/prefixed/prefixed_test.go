package prefixed_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/internal/prefixed"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errLow = prefixed.New("low", "invalid size")

func TestAnErrorSaysItsPrefixOnceWhereverItIsWrapped(t *testing.T) {
	low := prefixed.Kind("low", errLow, "%d bytes", 0)
	assert.EqualError(t, low, "low: invalid size: 0 bytes")
	mid := prefixed.Wrap("mid", low, "reserving for %q", "a")
	assert.EqualError(t, mid, `mid: reserving for "a": invalid size: 0 bytes`)
	top := prefixed.Wrap("top", mid, "opening")
	assert.EqualError(t, top, `top: opening: reserving for "a": invalid size: 0 bytes`)
	assert.ErrorIs(t, top, errLow, "the kind is in the chain")
	assert.Equal(t, "invalid size", prefixed.Text(errLow))
}

func TestForeignErrorsKeepTheirWords(t *testing.T) {
	err := prefixed.Wrap("scope", context.Canceled, "scope %q cancelled", "job")
	assert.EqualError(t, err, `scope: scope "job" cancelled: context canceled`)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, "plain", prefixed.Text(errors.New("plain")))
}

func TestJoinedErrorsLoseTheirPrefixesLineByLine(t *testing.T) {
	j := errors.Join(prefixed.Errorf("low", "one"), errors.New("two"))
	assert.Equal(t, "one\ntwo", prefixed.Text(j))
	assert.EqualError(t, prefixed.Wrap("top", j, "closing"), "top: closing: one\ntwo")
}

func TestAKindSaysTheLayersPrefixAndTheSentinelsText(t *testing.T) {
	err := prefixed.KindWrap("mid", errLow, context.Canceled, "%d bytes", 3)
	assert.EqualError(t, err, "mid: invalid size: 3 bytes: context canceled")
	assert.ErrorIs(t, err, errLow)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestSubjectIsReadFromTheStructureNotTheText(t *testing.T) {
	about := prefixed.About("parent/child", "scope", errLow, "reserving for %q", "parent/child")
	wrapped := errors.Join(errors.New("other"), prefixed.Wrap("top", about, "opening"))
	s, ok := prefixed.Subject(wrapped)
	assert.True(t, ok)
	assert.Equal(t, "parent/child", s)
	_, ok = prefixed.Subject(prefixed.Wrap("top", errLow, "parent/child"))
	assert.False(t, ok, "a path in the text is no subject")
}
