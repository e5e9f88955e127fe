package sim

import (
	"fmt"
	"strings"
)

// Semantics selects whose testbed the simulator reproduces where the two
// artifacts differ.
type Semantics int

const (
	// PolluxSemantics is the Pollux artifact's testbed: every
	// (re)allocation costs Config.Restart seconds, every change of a job's
	// placement restarts it, and step times are the traces'.
	PolluxSemantics Semantics = iota
	// SiaSemantics is Sia's simulator: per-application calibration
	// factors slow every job's progress down (real runs were slower than
	// the traces), checkpoint-restore delays are per application, a job
	// restarts only when its GPU type or its placement tuple changes,
	// placements spanning more nodes than a type was profiled on are
	// respread over those nodes, a job's atomic batch is bounded by what
	// its placement was measured with, and finish-time fairness compares
	// with the job run alone by Sia on its share of every GPU type.
	SiaSemantics
)

// String names the semantics as the --semantics flag does.
func (s Semantics) String() string {
	if s == SiaSemantics {
		return "sia"
	}
	return "pollux"
}

// ParseSemantics reads "pollux" or "sia".
func ParseSemantics(s string) (Semantics, error) {
	switch strings.ToLower(s) {
	case "pollux":
		return PolluxSemantics, nil
	case "sia":
		return SiaSemantics, nil
	}
	return 0, fmt.Errorf("%w: semantics %q, want pollux or sia", ErrBadConfig, s)
}

// MarshalText implements encoding.TextMarshaler.
func (s Semantics) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// siaSlowdowns are the per-application calibration factors of Sia's
// simulator (simulator_config.py): real runs were this much slower than
// the traces, so progress is divided by them.
var siaSlowdowns = map[string]float64{
	"cifar10": 1.8, "imagenet": 1.2, "yolov3": 1.2, "bert": 1.2,
	"deepspeech2": 1.2, "ncf": 1.5, "gpt_pmp": 1.0,
}

func siaSlowdown(app string) float64 {
	if f, ok := siaSlowdowns[app]; ok {
		return f
	}
	return 1
}

// siaRestarts are the checkpoint-restore delays, in seconds, that Sia's
// simulator charges per application (applications.py, measured on its
// physical cluster); other applications pay 30 s.
var siaRestarts = map[string]float64{
	"cifar10": 50, "deepspeech2": 25, "bert": 120, "yolov3": 80, "imagenet": 250, "ncf": 15,
}

// restartDelay is what one (re)allocation of a job of app costs.
func (c Config) restartDelay(app string) float64 {
	if c.Semantics == SiaSemantics {
		if d, ok := siaRestarts[app]; ok {
			return d
		}
		return 30
	}
	return c.Restart
}
