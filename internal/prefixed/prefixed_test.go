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
	low := prefixed.Kind(errLow, "%d bytes", 0)
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

func TestTextAsNamesSentinelsInAnotherPackagesWords(t *testing.T) {
	mine := prefixed.New("top", "bad size")
	words := func(err error) string {
		if err == errLow {
			return prefixed.Text(mine)
		}
		return ""
	}
	err := prefixed.KindWrap(errLow, context.Canceled, "%d bytes", 3)
	assert.Equal(t, "bad size: 3 bytes: context canceled", prefixed.TextAs(err, words))
	assert.ErrorIs(t, err, context.Canceled)
}
