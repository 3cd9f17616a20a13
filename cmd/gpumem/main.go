// Command gpumem works with device-memory traces.
//
//	gpumem replay [flags] FILE
//	gpumem stress [flags]
//
// replay replays an allocation trace (CSV, plain or gzip, in the format of
// shared/traces/README.md) through gpuscope's pool and prints one JSON object:
// peak requested and reserved bytes, their ratio, the calls made to the
// source, and nanoseconds per operation. By default it runs on a simulated
// device that hands out address ranges without touching memory.
//
// stress opens and closes nested scopes from many goroutines for a while
// and checks that no memory is left; compute-sanitizer runs it on a GPU.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/pool"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gpumem:", err)
		var st *exitStatus
		if errors.As(err, &st) {
			os.Exit(st.code)
		}
		os.Exit(1)
	}
}

// exitOutOfMemory is replay's exit status when allocations of the trace
// ran out of memory: the JSON is printed as usual, and a note on stderr.
const exitOutOfMemory = 3

// exitStatus is an error that ends gpumem with a status other than 1.
type exitStatus struct {
	code int
	err  error
}

func (e *exitStatus) Error() string { return e.err.Error() }
func (e *exitStatus) Unwrap() error { return e.err }

// A command is one of gpumem's commands: its options, which declare
// their flags, and its run on the positional arguments once the flags are
// parsed.
type command interface {
	declare(fs *flag.FlagSet)
	run(positional []string, stdout, stderr io.Writer) error
}

// commands are gpumem's commands, by name, in the order help lists them;
// each makes a command with its options unset.
var commands = []struct {
	name string
	make func() command
}{
	{"replay", func() command { return new(replayOptions) }},
	{"plot", func() command { return new(plotOptions) }},
	{"stress", func() command { return new(stressOptions) }},
}

// runCommand runs c on args: where they ask for help, it prints it to
// stdout; else it parses the flags, saying on stderr what is wrong with
// them, and runs c on the positional arguments.
func runCommand(name string, c command, args []string, stdout, stderr io.Writer) error {
	if wantsHelp(args) {
		help(stdout)
		return nil
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	c.declare(fs)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	positional, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	err = c.run(positional, stdout, stderr)
	if _, ok := errors.AsType[*usageError](err); ok {
		fs.Usage()
	}
	return err
}

// usageError is a command's arguments not being what it takes: the
// command's usage and flags follow it on stderr.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// usageErrorf returns a usageError that says what is wrong.
func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// parseArgs parses args with fs, flags before or after the positional
// arguments (a "--" ends the flags), and returns the positional ones.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

const usage = `usage: gpumem replay [flags] FILE
       gpumem plot [flags] -o OUT.svg|OUT.html FILE
       gpumem stress [flags]
       gpumem help

Flags may come before or after FILE.

replay replays an allocation trace (CSV: action,addr,size,stream, plain or
gzip) through gpuscope's pool and prints one JSON object: peak requested and
reserved bytes and their ratio, every driver call by kind and its time
(measured with --driver cuda, modelled from an H200's costs with --driver
sim), and the time of each pass. plot draws a trace's memory over its
events: requested bytes stacked by size (or by scope, where the trace has
that column), and what the pool reserves replaying it. stress opens nested
scopes from many goroutines for a while and checks that nothing is left.
"alloc_and_free_events" counts the trace's alloc and free_requested lines,
once, as plot does. A replay in which allocations ran out of memory still prints
its JSON (peak_requested_bytes is then the trace's own peak, not what
succeeded, and ooms counts the failures), says so on stderr, and exits
with status 3; other errors exit with status 1. The trace format, and the
longest line a trace may have, are in docs/trace-format.md.
`

func run(args []string, stdout, stderr io.Writer) error {
	cmd := ""
	if len(args) > 0 {
		cmd = args[0]
	}
	for _, c := range commands {
		if c.name == cmd {
			return runCommand(c.name, c.make(), args[1:], stdout, stderr)
		}
	}
	switch cmd {
	case "help", "-h", "-help", "--help":
		help(stdout)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return errors.New("unknown or missing command; the commands are replay, plot, stress and help")
}

// help prints the usage of every command, with its flags.
func help(w io.Writer) {
	fmt.Fprint(w, usage)
	for _, c := range commands {
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.make().declare(fs)
		fmt.Fprintf(w, "\nflags of %s:\n", c.name)
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
}

// wantsHelp reports whether args ask for help rather than a run.
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// replayOptions are the flags of replay.
type replayOptions struct {
	driver, expand, timeline                  string
	capacity, pageSize, maxReserved, maxSplit int64
	threshold, step                           int64
	repeat, shards                            int
}

func (o *replayOptions) declare(fs *flag.FlagSet) {
	fs.StringVar(&o.driver, "driver", "sim", "where memory comes from: sim (simulated, touches no memory), or cuda (GPU 0, in a gpumem built with -tags cuda)")
	fs.Int64Var(&o.capacity, "capacity", 0, "with --driver sim: refuse memory beyond this many bytes (0: unlimited); to cap a GPU, use --max-reserved")
	fs.Int64Var(&o.pageSize, "page-size", sim.DefaultPageSize, "with --driver sim: bytes per mapped page")
	fs.StringVar(&o.expand, "expand", "auto", "auto (map pages where the source can), never, always")
	fs.Int64Var(&o.maxReserved, "max-reserved", 0, "pool MaxReserved: most bytes the pool reserves, with either driver (0: no cap)")
	fs.Int64Var(&o.maxSplit, "max-split", 0, "pool MaxSplitSize in bytes (0: unlimited)")
	fs.Int64Var(&o.threshold, "release-threshold", -1, "pool ReleaseThreshold in bytes (-1: keep everything)")
	fs.IntVar(&o.repeat, "repeat", 1, "replay the trace this many times, freeing what is still live between repetitions")
	fs.StringVar(&o.timeline, "timeline", "", "write the bytes requested and reserved after every event of the first pass to this CSV file (slows the replay: time it without)")
	fs.Int64Var(&o.step, "growth-step", pool.DefaultGrowthStep, "pool GrowthStep in bytes: large arenas grow by multiples of it (0: by exactly what a request lacks)")
	fs.IntVar(&o.shards, "shards", 1, "pool front-cache shards; a replay is one goroutine, and with one shard it is deterministic (0: the pool's default, 2 x GOMAXPROCS)")
}

// poolOptions returns the pool's options the flags ask for.
func (o *replayOptions) poolOptions() ([]pool.Option, error) {
	var opts []pool.Option
	switch o.expand {
	case "auto":
	case "never":
		opts = append(opts, pool.Expand(pool.ExpandNever))
	case "always":
		opts = append(opts, pool.Expand(pool.ExpandAlways))
	default:
		return nil, fmt.Errorf("--expand %q: want auto, never or always", o.expand)
	}
	if o.maxReserved != 0 {
		opts = append(opts, pool.MaxReserved(o.maxReserved))
	}
	if o.maxSplit != 0 {
		opts = append(opts, pool.MaxSplitSize(o.maxSplit))
	}
	if o.shards != 0 {
		opts = append(opts, pool.Shards(o.shards))
	}
	if o.repeat < 1 {
		return nil, fmt.Errorf("--repeat %d: must be at least 1", o.repeat)
	}
	if o.step != pool.DefaultGrowthStep {
		opts = append(opts, pool.GrowthStep(o.step))
	}
	if o.threshold >= 0 {
		opts = append(opts, pool.ReleaseThreshold(o.threshold))
	}
	return opts, nil
}

// run replays the trace in files, its one positional argument, and
// reports the result on stdout.
func (o *replayOptions) run(files []string, stdout, stderr io.Writer) error {
	if len(files) != 1 {
		return usageErrorf("replay needs one trace FILE, got %d", len(files))
	}
	file := files[0]
	opts, err := o.poolOptions()
	if err != nil {
		return err
	}
	if _, err := os.Stat(file); err != nil {
		return err
	}
	src, closeSrc, err := openSource(o.driver, o.capacity, o.pageSize)
	if err != nil {
		return err
	}
	defer closeSrc()
	var model sim.CostTable
	if o.driver == "sim" {
		model = sim.H200
	}
	src, m, err := newMeter(src, model)
	if err != nil {
		return err
	}
	p, err := pool.New(src, opts...)
	if err != nil {
		return err
	}
	var tl io.Writer
	if o.timeline != "" {
		f, err := os.Create(o.timeline)
		if err != nil {
			return err
		}
		bw := bufio.NewWriter(f)
		defer func() { _ = bw.Flush(); _ = f.Close() }()
		tl = bw
	}
	res, err := replay(p, openTraceFile(file, stderr), m, o.repeat, tl)
	if serr := m.streams.close(p); err == nil && serr != nil {
		err = serr
	}
	if cerr := p.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	res.Trace = file
	res.Driver = o.driver
	return report(stdout, res)
}

// report writes a replay's result as JSON; allocations that ran out of
// memory make it an error of exit status exitOutOfMemory.
func report(stdout io.Writer, res result) error {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		return err
	}
	if res.OOMs > 0 {
		return &exitStatus{exitOutOfMemory, fmt.Errorf("%s: %d of %d allocations ran out of memory (the pool reserved at most %d bytes); peak_requested_bytes, %d, is the trace's own",
			res.Trace, res.OOMs, res.Allocs, res.PeakReservedBytes, res.PeakRequestedBytes)}
	}
	return nil
}
