package main

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuscope/gpuscope/internal/units"
)

// The flags of gpumem's commands take only values they can honour: each
// is parsed by one of these types, which refuses the rest with an error
// that says what the flag accepts.

// maxBytes is the largest size a flag takes: 256 TiB, the most the pool
// allocates (pool.MaxSize), beyond any device.
const maxBytes = 1 << 48

// sizes is how the errors of the size flags say what a size may be written as.
const sizes = "in bytes or with a unit (4096, 512MiB, 80GB)"

// byteFlag is a flag of a size in bytes (units.ParseBytes) in [min, max];
// with pow2, a power of two. Where zero or minusOne say what 0 or -1
// mean, the flag's error says it; minusOne also lets the flag take -1.
// note ends the error.
type byteFlag struct {
	p              *int64
	min, max       int64
	pow2           bool
	zero, minusOne string
	note           string
}

func (f *byteFlag) String() string {
	if f == nil || f.p == nil {
		return ""
	}
	if *f.p < 0 {
		return strconv.FormatInt(*f.p, 10)
	}
	return units.ExactBytes(*f.p)
}

func (f *byteFlag) Set(s string) error {
	if f.minusOne != "" && strings.TrimSpace(s) == "-1" {
		*f.p = -1
		return nil
	}
	n, err := units.ParseBytes(s)
	if err != nil || n < f.min || n > f.max || f.pow2 && n&(n-1) != 0 {
		return fmt.Errorf("want %s", f.accepts())
	}
	*f.p = n
	return nil
}

// accepts says what the flag takes.
func (f *byteFlag) accepts() string {
	what := fmt.Sprintf("a size from %s to %s, %s", units.ExactBytes(f.min), units.ExactBytes(f.max), sizes)
	switch {
	case f.pow2:
		what = fmt.Sprintf("a power of two from %s to %s, %s", units.ExactBytes(f.min), units.ExactBytes(f.max), sizes)
	case f.zero != "" && f.min == 0:
		what = fmt.Sprintf("0 (%s) or a size up to %s, %s", f.zero, units.ExactBytes(f.max), sizes)
	}
	if f.minusOne != "" {
		what = fmt.Sprintf("-1 (%s) or %s", f.minusOne, what)
	}
	if f.note != "" {
		what += "; " + f.note
	}
	return what
}

// bytesVar declares a size flag; see byteFlag.
func bytesVar(fs *flag.FlagSet, p *int64, name string, value int64, f byteFlag, usage string) {
	*p = value
	f.p = p
	fs.Var(&f, name, usage)
}

// rangeFlag is a flag of a number in [min, max], read by parse and shown
// by format; what names the number in the flag's error ("a whole number").
type rangeFlag[T int | float64] struct {
	p        *T
	min, max T
	parse    func(string) (T, error)
	format   func(T) string
	what     string
}

func (f *rangeFlag[T]) String() string {
	if f == nil || f.p == nil {
		return ""
	}
	return f.format(*f.p)
}

func (f *rangeFlag[T]) Set(s string) error {
	v, err := f.parse(s)
	if err != nil || v != v || v < f.min || v > f.max { // v != v: NaN
		return fmt.Errorf("want %s from %v to %v", f.what, f.min, f.max)
	}
	*f.p = v
	return nil
}

// intVar declares an integer flag in [min, max].
func intVar(fs *flag.FlagSet, p *int, name string, value, min, max int, usage string) {
	*p = value
	fs.Var(&rangeFlag[int]{p: p, min: min, max: max, parse: strconv.Atoi, format: strconv.Itoa, what: "a whole number"}, name, usage)
}

// secondsVar declares a flag of a time in seconds in [min, max].
func secondsVar(fs *flag.FlagSet, p *float64, name string, value, min, max float64, usage string) {
	*p = value
	fs.Var(&rangeFlag[float64]{p: p, min: min, max: max,
		parse:  func(s string) (float64, error) { return strconv.ParseFloat(s, 64) },
		format: func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) },
		what:   "a number of seconds"}, name, usage)
}

// choiceFlag is a flag of one of a few words.
type choiceFlag struct {
	p     *string
	words []string
}

func (f *choiceFlag) String() string {
	if f == nil || f.p == nil {
		return ""
	}
	return *f.p
}

func (f *choiceFlag) Set(s string) error {
	if !slices.Contains(f.words, s) {
		return fmt.Errorf("want %s", orList(f.words))
	}
	*f.p = s
	return nil
}

// choiceVar declares a flag of one of words.
func choiceVar(fs *flag.FlagSet, p *string, name, value string, words []string, usage string) {
	*p = value
	fs.Var(&choiceFlag{p: p, words: words}, name, usage)
}

// orList writes words as "a, b or c".
func orList(words []string) string { return list(words, "or") }

// andList writes words as "a, b and c".
func andList(words []string) string { return list(words, "and") }

func list(words []string, conj string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " " + conj + " " + words[len(words)-1]
}

// driverMeans says what each driver is, for help and errors: where memory
// comes from. Each command runs on some of them (driverVar).
var driverMeans = map[string]string{
	"sim":  "sim (a simulated device: address ranges, no memory touched)",
	"host": "host (host memory standing in for a GPU)",
	"cuda": "cuda (GPU 0, in a gpumem built with -tags cuda)",
}

// driverVar declares --driver for a command that runs on runsOn: it takes
// those words alone, and its help and its error list them alone.
func driverVar(fs *flag.FlagSet, p *string, value string, runsOn ...string) {
	means := make([]string, len(runsOn))
	for i, d := range runsOn {
		means[i] = driverMeans[d]
	}
	choiceVar(fs, p, "driver", value, runsOn, "where memory comes from, the `driver`: "+orList(means))
}

// checkDriver says whether this gpumem can run on driver, which the flag
// took: cuda in a build without it is an error that says how to build one.
func checkDriver(driver string) error {
	if driver == "cuda" && !cudaBuilt {
		return fmt.Errorf("--driver cuda: this gpumem was built without CUDA; build one with it: go build -tags cuda ./cmd/gpumem")
	}
	return nil
}

// gotArgs says which positional arguments a command got, where it wanted
// one, naming each: "got 2: \"MiB\" and \"t.csv\"". Where one is a unit
// that a space parted from a size flag's number (--max-reserved 10 MiB),
// it says so.
func gotArgs(c *call) string {
	if len(c.args) == 0 {
		return "got none"
	}
	quoted := make([]string, len(c.args))
	for i, a := range c.args {
		quoted[i] = strconv.Quote(a)
	}
	msg := fmt.Sprintf("got %d: %s", len(c.args), andList(quoted))
	if c.strayUnit != "" {
		msg += fmt.Sprintf("; %q is a unit a space parted from its number: write a size as one word (10MiB)", c.strayUnit)
	}
	return msg
}

// strayUnit returns the first of args that reads as a unit of bytes right
// after a flag's number ("MiB" in --max-reserved 10 MiB, or in
// --max-reserved=10 MiB), or "": a word after anything else is no unit
// parted from its number ("b" in "a b" is a file).
func strayUnit(args []string) string {
	for i := 1; i < len(args); i++ {
		num := args[i-1]
		_, value, joined := strings.Cut(num, "=")
		switch {
		case strings.HasPrefix(num, "-") && joined: // --max-reserved=10
			num = value
		case strings.HasPrefix(num, "-"), i < 2: // a flag, or a word no flag precedes
			continue
		case !strings.HasPrefix(args[i-2], "-") || strings.Contains(args[i-2], "="): // a word, not a flag's value
			continue
		}
		a := args[i]
		if _, err := strconv.ParseFloat(num, 64); err != nil || a == "" || strings.TrimLeft(a, "0123456789. ") != a {
			continue
		}
		if _, err := units.ParseBytes("1" + a); err == nil {
			return a
		}
	}
	return ""
}
