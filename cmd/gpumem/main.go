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

	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/pool/sim"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gpumem:", err)
		os.Exit(1)
	}
}

const usage = `usage: gpumem replay [flags] FILE
       gpumem stress [flags]

replay replays an allocation trace through the pool and prints one JSON
object. stress runs nested scopes from many goroutines and checks that
nothing is left. Flags of replay:
`

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "stress" {
		return stress(args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "replay" {
		fmt.Fprint(stderr, usage)
		return errors.New("unknown or missing command; the commands are replay and stress")
	}
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	driver := fs.String("driver", "sim", "where memory comes from: sim (simulated, touches no memory)"+extraDrivers)
	capacity := fs.Int64("capacity", 0, "with --driver sim: refuse memory beyond this many bytes (0: unlimited)")
	pageSize := fs.Int64("page-size", sim.DefaultPageSize, "with --driver sim: bytes per mapped page")
	expand := fs.String("expand", "auto", "auto (map pages where the source can), never, always")
	maxReserved := fs.Int64("max-reserved", 0, "pool MaxReserved: most bytes the pool reserves (0: no cap)")
	maxSplit := fs.Int64("max-split", 0, "pool MaxSplitSize in bytes (0: unlimited)")
	threshold := fs.Int64("release-threshold", -1, "pool ReleaseThreshold in bytes (-1: keep everything)")
	repeat := fs.Int("repeat", 1, "replay the trace this many times, freeing what is still live between repetitions")
	timeline := fs.String("timeline", "", "write the bytes requested and reserved after every event of the first pass to this CSV file (slows the replay: time it without)")
	step := fs.Int64("growth-step", pool.DefaultGrowthStep, "pool GrowthStep in bytes: large arenas grow by multiples of it (0: by exactly what a request lacks)")
	shards := fs.Int("shards", 1, "pool front-cache shards; a replay is one goroutine, and with one shard it is deterministic (0: the pool's default, 2 x GOMAXPROCS)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("replay needs one trace FILE")
	}
	var opts []pool.Option
	switch *expand {
	case "auto":
	case "never":
		opts = append(opts, pool.Expand(pool.ExpandNever))
	case "always":
		opts = append(opts, pool.Expand(pool.ExpandAlways))
	default:
		return fmt.Errorf("--expand %q: want auto, never or always", *expand)
	}
	if *maxReserved != 0 {
		opts = append(opts, pool.MaxReserved(*maxReserved))
	}
	if *maxSplit != 0 {
		opts = append(opts, pool.MaxSplitSize(*maxSplit))
	}
	if *shards != 0 {
		opts = append(opts, pool.Shards(*shards))
	}
	if *repeat < 1 {
		return fmt.Errorf("--repeat %d: must be at least 1", *repeat)
	}
	if *step != pool.DefaultGrowthStep {
		opts = append(opts, pool.GrowthStep(*step))
	}
	if *threshold >= 0 {
		opts = append(opts, pool.ReleaseThreshold(*threshold))
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	defer f.Close()
	events, err := readTrace(f)
	if err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	src, closeSrc, err := openSource(*driver, *capacity, *pageSize)
	if err != nil {
		return err
	}
	defer closeSrc()
	var model sim.CostTable
	if *driver == "sim" {
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
	if *timeline != "" {
		f, err := os.Create(*timeline)
		if err != nil {
			return err
		}
		bw := bufio.NewWriter(f)
		defer func() { _ = bw.Flush(); _ = f.Close() }()
		tl = bw
	}
	res, err := replay(p, events, m, *repeat, tl)
	if cerr := p.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	res.Trace = fs.Arg(0)
	res.Driver = *driver
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}
