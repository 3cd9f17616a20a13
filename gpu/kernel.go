package gpu

import (
	"errors"
	"math"

	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/scope"
)

// Module is compiled device code (PTX or a cubin) loaded on a device, owned
// by the scope that loaded it: unloaded when the scope ends, after the
// scope's streams have finished their work. Its methods fail with
// ErrScopeClosed after that.
type Module struct {
	dev *Device
	kl  driver.KernelLauncher
	id  uintptr

	life lifetime
}

// Function is a kernel of a loaded module.
type Function struct {
	mod  *Module
	id   uintptr
	name string
}

// Dim is a grid or block size in threads or blocks, x by y by z; a zero
// size counts as 1.
type Dim struct{ X, Y, Z int }

func (d Dim) three() [3]int { return [3]int{max(d.X, 1), max(d.Y, 1), max(d.Z, 1)} }

// LoadModule loads image (PTX or a cubin) on the scope's device. The host
// device runs no kernels: there it fails with ErrNotSupported.
func (s *Scope) LoadModule(image []byte) (*Module, error) {
	if !s.valid() {
		return nil, errNilScope
	}
	if cause := s.evictedErr(); cause != nil {
		return nil, cause
	}
	kl, ok := s.dev.drv.(driver.KernelLauncher)
	if !ok {
		return nil, prefixed.Kind("gpu", ErrNotSupported, "device %s loads no kernels", s.dev.name)
	}
	if len(image) == 0 {
		return nil, prefixed.Errorf("gpu", "LoadModule: empty image")
	}
	id, err := kl.LoadModule(image)
	if err != nil {
		return nil, deviceError(prefixed.Wrap("gpu", err, "LoadModule"))
	}
	m := &Module{dev: s.dev, kl: kl, id: id}
	// Unloaded once the scope's memory is released: after its streams'
	// work, whenever they were made.
	if _, err := s.s.OwnResource(scope.Resource{Kind: "module", Final: m.end}); err != nil {
		return nil, s.refused(errors.Join(err, m.end()))
	}
	return m, nil
}

func (m *Module) end() error {
	return m.life.end(func() error { return m.kl.UnloadModule(m.id) })
}

// errModuleEnded is what a Module's methods return once it was unloaded.
var errModuleEnded = prefixed.Kind("gpu", ErrScopeClosed, "the module was unloaded with its scope")

// Function returns the kernel called name.
func (m *Module) Function(name string) (*Function, error) {
	if m == nil || m.kl == nil {
		return nil, prefixed.Kind("gpu", ErrScopeClosed, "nil or zero Module")
	}
	var id uintptr
	err := m.life.use(errModuleEnded, func() error {
		var err error
		if id, err = m.kl.Function(m.id, name); err != nil {
			return deviceError(prefixed.Wrap("gpu", err, "kernel %q", name))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &Function{mod: m, id: id, name: name}, nil
}

// kernelArg is what a Buffer and a Slice are to Launch.
type kernelArg interface{ buffer() Buffer }

func (b Buffer) buffer() Buffer { return b }

// Launch queues the kernel on st (nil: the default stream) with grid x
// block threads and sharedBytes of dynamic shared memory, and returns once
// it is queued. args are the kernel's arguments, in order: a Buffer or a
// Slice passes its device address, after checking that it is live (a
// stale one fails the launch, not the GPU) and recording its use on st; an
// integer or a float passes its value. The buffers must stay live until
// the kernel has run: free them in the scope's stream order (a buffer of
// a scope on st, or one the launch recorded on st, is not reused before
// st has passed the kernel).
func (f *Function) Launch(grid, block Dim, sharedBytes int, st *Stream, args ...any) error {
	if f == nil || f.mod == nil || f.mod.kl == nil {
		return prefixed.Kind("gpu", ErrScopeClosed, "nil or zero Function")
	}
	if st == nil {
		return f.launch(grid, block, sharedBytes, 0, args)
	}
	if !st.valid() {
		return errNilStream
	}
	if st.dev != f.mod.dev {
		return prefixed.Kind("gpu", ErrWrongScope, "a stream of device %s for a kernel of %s", st.dev.name, f.mod.dev.name)
	}
	return st.life.use(errStreamEnded, func() error { return f.launch(grid, block, sharedBytes, st.id, args) })
}

// launch is the work of Launch on stream, which the caller holds live.
func (f *Function) launch(grid, block Dim, sharedBytes int, stream uintptr, args []any) error {
	m := f.mod
	params := make([]uint64, len(args))
	var bufs []int // the arguments that are buffers
	for i, a := range args {
		switch v := a.(type) {
		case kernelArg:
			b := v.buffer()
			if b.IsZero() || b.dev != m.dev {
				return prefixed.Kind("gpu", ErrWrongScope, "kernel %q argument %d: a buffer of another device, or none", f.name, i)
			}
			bufs = append(bufs, i)
		case int:
			params[i] = uint64(v)
		case int32:
			params[i] = uint64(uint32(v))
		case int64:
			params[i] = uint64(v)
		case uint32:
			params[i] = uint64(v)
		case uint64:
			params[i] = v
		case uintptr:
			params[i] = uint64(v)
		case float32:
			params[i] = uint64(math.Float32bits(v))
		case float64:
			params[i] = math.Float64bits(v)
		default:
			return prefixed.Errorf("gpu", "kernel %q argument %d: %T is not a Buffer, a Slice, an integer or a float", f.name, i, a)
		}
	}
	// Hold every buffer live while the launch is queued, one inside the
	// other, and take its address.
	var hold func(k int) error
	hold = func(k int) error {
		if k == len(bufs) {
			return m.kl.Launch(f.id, grid.three(), block.three(), sharedBytes, stream, params)
		}
		i := bufs[k]
		b := args[i].(kernelArg).buffer()
		return b.useOn(func(ptr, own uintptr) error {
			if own != stream {
				if err := b.ref.RecordUse(stream); err != nil {
					return err
				}
			}
			params[i] = uint64(ptr)
			return hold(k + 1)
		})
	}
	return m.life.use(errModuleEnded, func() error {
		if err := hold(0); err != nil {
			return deviceError(prefixed.Wrap("gpu", err, "launching %q", f.name))
		}
		return nil
	})
}
