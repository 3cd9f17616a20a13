// Package scope is the ownership tree of gpuscope, independent of drivers.
// A [Scope] owns allocations from a device's pool; closing it releases them,
// last allocated first. Scopes nest: a child's bytes count against every
// ancestor's limit, a scope may reserve bytes for itself and its children,
// and an allocation can move to the parent with [Scope.Keep].
//
// Package gpu wraps this package for users; gputest reads it to find leaks.
package scope
