// Package leakcheck shows how a package's tests prove that it frees its GPU
// memory: its TestMain calls gputest.VerifyTestMain (see leakcheck_test.go).
//
// The package itself is a small cache of device buffers keyed by name, the
// kind of code that leaks when an entry is replaced without freeing the old
// buffer.
package leakcheck

import (
	"sync"

	"github.com/gpuscope/gpuscope/gpu"
)

// Cache keeps one device buffer per key in a long-lived scope.
type Cache struct {
	mu    sync.Mutex // protects bufs
	scope *gpu.Scope
	bufs  map[string]gpu.Buffer
}

// New returns a cache whose buffers live on dev until Close.
func New(dev *gpu.Device) (*Cache, error) {
	s, err := dev.NewScope(gpu.Name("cache"))
	if err != nil {
		return nil, err
	}
	return &Cache{scope: s, bufs: map[string]gpu.Buffer{}}, nil
}

// Put stores data under key, freeing the buffer it replaces.
func (c *Cache) Put(key string, data []byte) error {
	b, err := c.scope.Alloc(int64(max(len(data), 1)))
	if err != nil {
		return err
	}
	if err := b.CopyFromHost(data); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.bufs[key]; ok {
		if err := c.scope.Free(old); err != nil {
			return err
		}
	}
	c.bufs[key] = b
	return nil
}

// Close frees every buffer.
func (c *Cache) Close() error { return c.scope.Close() }
