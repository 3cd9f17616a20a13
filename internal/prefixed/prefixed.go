// Package prefixed builds the errors of gpuscope's layers (pool, scope, the
// drivers, gpu) so that a layer can wrap another's error without repeating
// its prefix: each error keeps its package's prefix apart from its text. A
// layer's own users read "pool: invalid size: 0 bytes"; a layer above,
// wrapping it, writes its own prefix once and the text after it
// ("gpu: invalid size: 0 bytes"). The sentinels are one set, declared once
// (package errdefs), so the texts need no translation between layers.
// Nothing here reads an error's message to decide anything: the structure
// is in the types.
package prefixed

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// Sentinel is a package's sentinel error, for errors.Is: its message is
// the package's prefix and its text.
type Sentinel struct{ pkg, text string }

// New returns the sentinel of package pkg that reads "pkg: text".
func New(pkg, text string) error { return &Sentinel{pkg, text} }

func (s *Sentinel) Error() string { return s.pkg + ": " + s.text }

// Text is the sentinel's message without its package's prefix.
func (s *Sentinel) Text() string { return s.text }

// Error is an error of a package: of a kind (a sentinel, or none), what
// happened, and its cause (or none). Its message is the package's prefix,
// then the kind's, the error's own and the cause's texts, each once.
type Error struct {
	pkg     string
	kind    error
	text    string
	cause   error
	subject string // what the error is about, for a layer above ([Subject])
}

// Kind returns package pkg's error of the kind of sentinel kind (made by
// [New], maybe in another package): "pool: invalid size: " and the
// formatted text, where kind reads "gpu: invalid size".
func Kind(pkg string, kind error, format string, args ...any) error {
	return &Error{pkg: pkg, kind: kind, text: fmt.Sprintf(format, args...)}
}

// Wrap returns package pkg's error that says what it was doing (the
// formatted text) and, where cause is not nil, the cause's text after it.
func Wrap(pkg string, cause error, format string, args ...any) error {
	return &Error{pkg: pkg, text: fmt.Sprintf(format, args...), cause: cause}
}

// About returns an error that is [Wrap]'s and is about subject (a scope's
// path, say): a layer above reads it with [Subject], not from the text.
func About(subject, pkg string, cause error, format string, args ...any) error {
	e := Wrap(pkg, cause, format, args...).(*Error)
	e.subject = subject
	return e
}

// Subject returns what the first error in err's tree made by [About] is
// about, depth first as errors.As looks.
func Subject(err error) (string, bool) {
	if e, ok := err.(*Error); ok && e.subject != "" {
		return e.subject, true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		if next := u.Unwrap(); next != nil {
			return Subject(next)
		}
	case interface{ Unwrap() []error }:
		for _, next := range u.Unwrap() {
			if s, ok := Subject(next); ok {
				return s, true
			}
		}
	}
	return "", false
}

// KindWrap is [Kind] with a cause.
func KindWrap(pkg string, kind, cause error, format string, args ...any) error {
	e := Kind(pkg, kind, format, args...).(*Error)
	e.cause = cause
	return e
}

// Errorf returns package pkg's error with the formatted text and no cause.
func Errorf(pkg, format string, args ...any) error {
	return &Error{pkg: pkg, text: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string { return e.pkg + ": " + e.Text() }

// Text is the message without the package's prefix.
func (e *Error) Text() string {
	parts := make([]string, 0, 3)
	if e.kind != nil {
		parts = append(parts, Text(e.kind))
	}
	if e.text != "" {
		parts = append(parts, e.text)
	}
	if e.cause != nil {
		parts = append(parts, Text(e.cause))
	}
	return strings.Join(parts, ": ")
}

// Unwrap returns the kind and the cause, those that are set.
func (e *Error) Unwrap() []error {
	var u []error
	if e.kind != nil {
		u = append(u, e.kind)
	}
	if e.cause != nil {
		u = append(u, e.cause)
	}
	return u
}

// Texter is an error that can say its message without its package's
// prefix: this package's errors, and the typed errors of the layers
// (pool.OOMError, scope.LimitError, the drivers').
type Texter interface {
	error
	Text() string
}

// Text is err's message without its package's prefix where err is one of
// the layers' errors (a [Texter], or errors.Join of them), and its message
// otherwise (a context's error, a system call's).
func Text(err error) string {
	switch e := err.(type) {
	case Texter:
		return e.Text()
	case interface{ Unwrap() []error }:
		if !isJoin(err) {
			return err.Error()
		}
		var parts []string
		for _, u := range e.Unwrap() {
			parts = append(parts, Text(u))
		}
		return strings.Join(parts, "\n")
	}
	return err.Error()
}

// joinType is the type of errors.Join's errors, whose message is their
// errors' messages on lines of their own (fmt.Errorf's with several %w
// unwrap the same way but write a message of their own).
var joinType = reflect.TypeOf(errors.Join(errors.New("")))

// isJoin reports whether err was made by errors.Join.
func isJoin(err error) bool { return reflect.TypeOf(err) == joinType }
