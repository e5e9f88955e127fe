package workerproto

import (
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"pollux/actors/jobspec"
)

// Environment variable names a worker is started with. The POLLUX_* names
// are the protocol; RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
// MASTER_PORT repeat the same values under the names PyTorch's env://
// rendezvous reads.
const (
	EnvJobID         = "POLLUX_JOB_ID"
	EnvIncarnation   = "POLLUX_INCARNATION"
	EnvRank          = "POLLUX_RANK"
	EnvLocalRank     = "POLLUX_LOCAL_RANK"
	EnvWorldSize     = "POLLUX_WORLD_SIZE"
	EnvNumNodes      = "POLLUX_NUM_NODES"
	EnvMasterAddr    = "POLLUX_MASTER_ADDR"
	EnvMasterPort    = "POLLUX_MASTER_PORT"
	EnvInitBatch     = "POLLUX_INIT_BSZ"
	EnvAtomicBatch   = "POLLUX_ATOMIC_BSZ"
	EnvAccumSteps    = "POLLUX_ACCUM_STEPS"
	EnvGain          = "POLLUX_GAIN"
	EnvCheckpointDir = "POLLUX_CHECKPOINT_DIR"
	EnvReportAddr    = "POLLUX_REPORT_ADDR"
	EnvReportCA      = "POLLUX_REPORT_CA"
	// EnvReportToken is the worker's report token (ReportToken): every
	// report carries it. Optional in the environment (a worker started
	// by hand has none), required by the agents' report port.
	EnvReportToken = "POLLUX_REPORT_TOKEN"
	// EnvReportTokenFile names a file holding the worker's report token,
	// which an agent writes readable by the worker's user only, so that
	// the token is in no environment (another job's worker could read
	// it in /proc/PID/environ). It takes the place of EnvReportToken.
	EnvReportTokenFile = "POLLUX_REPORT_TOKEN_FILE"
	EnvCUDADevices     = "CUDA_VISIBLE_DEVICES"
	// EnvCPUs is optional: the CPU ids of a CPU slot (`pollux agent
	// --cpu-slots N`), comma-separated. A worker pins itself to them.
	EnvCPUs = "POLLUX_CPUS"
	// EnvOMPThreads repeats the number of EnvCPUs for OpenMP and the
	// libraries that read it; it is set only with EnvCPUs.
	EnvOMPThreads = "OMP_NUM_THREADS"
)

// Env is what one worker process is told at start.
type Env struct {
	JobID       string
	Incarnation uint64
	// Rank in [0, WorldSize); LocalRank is the rank among the job's
	// workers on the same node.
	Rank, LocalRank int
	// WorldSize is K, the job's replica count; NumNodes is N.
	WorldSize, NumNodes int
	// MasterAddr and MasterPort are where rank 0 listens for the
	// collective-communication rendezvous.
	MasterAddr string
	MasterPort int
	// GPUs are the device indexes the worker may use
	// (CUDA_VISIBLE_DEVICES).
	GPUs []int
	// CPUs are the cores of a CPU slot (POLLUX_CPUS), for a worker that
	// runs without a GPU; empty otherwise.
	CPUs []int
	// InitBatch is M0; AtomicBatch is m, AccumSteps is s; Gain is the
	// AdaScale learning-rate multiplier for the total batch K*m*(s+1).
	InitBatch   int
	AtomicBatch int
	AccumSteps  int
	Gain        float64
	// CheckpointDir is where the worker saves on SIGTERM and restores
	// from on start; ReportAddr (host:port) is where it sends reports.
	CheckpointDir string
	ReportAddr    string
	// ReportCA is the absolute path of the cluster CA's certificate
	// (PEM): the worker connects to ReportAddr over TLS and checks that
	// the agent holds a certificate of this CA for that address. Empty:
	// plaintext (an agent running --insecure).
	ReportCA string
	// ReportToken is the secret this worker's reports carry (the token of
	// its job, incarnation and rank); empty: none given.
	ReportToken string
	// ReportTokenFile, if set, is the file the token is read from and
	// what Environ passes instead of the token (EnvReportTokenFile).
	ReportTokenFile string
}

// Validate reports whether e is complete and consistent.
func (e Env) Validate() error {
	switch {
	case jobspec.CheckName(e.JobID) != nil:
		return fmt.Errorf("%w: %s: %w", ErrBadEnv, EnvJobID, jobspec.CheckName(e.JobID))
	case e.WorldSize < 1:
		return fmt.Errorf("%w: %s %d, want >= 1", ErrBadEnv, EnvWorldSize, e.WorldSize)
	case e.Rank < 0 || e.Rank >= e.WorldSize:
		return fmt.Errorf("%w: %s %d outside [0, %d)", ErrBadEnv, EnvRank, e.Rank, e.WorldSize)
	case e.LocalRank < 0 || e.LocalRank > e.Rank:
		return fmt.Errorf("%w: %s %d outside [0, %d]", ErrBadEnv, EnvLocalRank, e.LocalRank, e.Rank)
	case e.NumNodes < 1 || e.NumNodes > e.WorldSize:
		return fmt.Errorf("%w: %s %d outside [1, %d]", ErrBadEnv, EnvNumNodes, e.NumNodes, e.WorldSize)
	case e.MasterAddr == "":
		return fmt.Errorf("%w: %s is empty", ErrBadEnv, EnvMasterAddr)
	case e.MasterPort < 1 || e.MasterPort > 65535:
		return fmt.Errorf("%w: %s %d outside [1, 65535]", ErrBadEnv, EnvMasterPort, e.MasterPort)
	case e.InitBatch < 1 || e.AtomicBatch < 1:
		return fmt.Errorf("%w: batch sizes %s %d, %s %d, want >= 1", ErrBadEnv, EnvInitBatch, e.InitBatch, EnvAtomicBatch, e.AtomicBatch)
	case e.AccumSteps < 0:
		return fmt.Errorf("%w: %s %d is negative", ErrBadEnv, EnvAccumSteps, e.AccumSteps)
	case !(e.Gain > 0) || math.IsInf(e.Gain, 0):
		return fmt.Errorf("%w: %s %v, want a finite number > 0", ErrBadEnv, EnvGain, e.Gain)
	case e.CheckpointDir == "":
		return fmt.Errorf("%w: %s is empty", ErrBadEnv, EnvCheckpointDir)
	}
	if len(e.ReportToken) > MaxTokenBytes {
		return fmt.Errorf("%w: %s of %d bytes, at most %d", ErrBadEnv, EnvReportToken, len(e.ReportToken), MaxTokenBytes)
	}
	if e.ReportCA != "" && !filepath.IsAbs(e.ReportCA) {
		return fmt.Errorf("%w: %s %q is not an absolute path", ErrBadEnv, EnvReportCA, e.ReportCA)
	}
	if _, _, err := net.SplitHostPort(e.ReportAddr); err != nil {
		return fmt.Errorf("%w: %s %q: %w", ErrBadEnv, EnvReportAddr, e.ReportAddr, err)
	}
	for _, g := range e.GPUs {
		if g < 0 {
			return fmt.Errorf("%w: %s has negative device %d", ErrBadEnv, EnvCUDADevices, g)
		}
	}
	for _, c := range e.CPUs {
		if c < 0 {
			return fmt.Errorf("%w: %s has negative CPU %d", ErrBadEnv, EnvCPUs, c)
		}
	}
	return nil
}

// readTokenFile reads a report token from the file named by
// EnvReportTokenFile (trailing white space trimmed).
func readTokenFile(name string) (string, error) {
	if !filepath.IsAbs(name) {
		return "", fmt.Errorf("%w: %s %q is not an absolute path", ErrBadEnv, EnvReportTokenFile, name)
	}
	f, err := os.Open(name)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrBadEnv, EnvReportTokenFile, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxTokenBytes+2))
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrBadEnv, EnvReportTokenFile, err)
	}
	return strings.TrimRight(string(b), " \t\r\n"), nil
}

// Environ returns e as KEY=VALUE strings for exec.Cmd.Env (to be appended
// to the inherited environment). It does not validate. POLLUX_REPORT_CA
// and POLLUX_REPORT_TOKEN are left out when empty.
func (e Env) Environ() []string {
	kv := [][2]string{
		{EnvJobID, e.JobID},
		{EnvIncarnation, strconv.FormatUint(e.Incarnation, 10)},
		{EnvRank, strconv.Itoa(e.Rank)},
		{EnvLocalRank, strconv.Itoa(e.LocalRank)},
		{EnvWorldSize, strconv.Itoa(e.WorldSize)},
		{EnvNumNodes, strconv.Itoa(e.NumNodes)},
		{EnvMasterAddr, e.MasterAddr},
		{EnvMasterPort, strconv.Itoa(e.MasterPort)},
		{EnvInitBatch, strconv.Itoa(e.InitBatch)},
		{EnvAtomicBatch, strconv.Itoa(e.AtomicBatch)},
		{EnvAccumSteps, strconv.Itoa(e.AccumSteps)},
		{EnvGain, strconv.FormatFloat(e.Gain, 'g', -1, 64)},
		{EnvCheckpointDir, e.CheckpointDir},
		{EnvReportAddr, e.ReportAddr},
		{EnvCUDADevices, joinInts(e.GPUs)},
		{"RANK", strconv.Itoa(e.Rank)},
		{"LOCAL_RANK", strconv.Itoa(e.LocalRank)},
		{"WORLD_SIZE", strconv.Itoa(e.WorldSize)},
		{"MASTER_ADDR", e.MasterAddr},
		{"MASTER_PORT", strconv.Itoa(e.MasterPort)},
	}
	if e.ReportCA != "" {
		kv = append(kv, [2]string{EnvReportCA, e.ReportCA})
	}
	switch {
	case e.ReportTokenFile != "":
		kv = append(kv, [2]string{EnvReportTokenFile, e.ReportTokenFile})
	case e.ReportToken != "":
		kv = append(kv, [2]string{EnvReportToken, e.ReportToken})
	}
	if len(e.CPUs) > 0 {
		kv = append(kv, [2]string{EnvCPUs, joinInts(e.CPUs)}, [2]string{EnvOMPThreads, strconv.Itoa(len(e.CPUs))})
	}
	out := make([]string, len(kv))
	for i, p := range kv {
		out[i] = p[0] + "=" + p[1]
	}
	return out
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// ParseEnv reads a worker's environment through lookup (os.LookupEnv in a
// worker) and validates it.
func ParseEnv(lookup func(string) (string, bool)) (Env, error) {
	p := envParser{lookup: lookup}
	e := Env{
		JobID:         p.str(EnvJobID),
		Incarnation:   p.uint(EnvIncarnation),
		Rank:          p.int(EnvRank),
		LocalRank:     p.int(EnvLocalRank),
		WorldSize:     p.int(EnvWorldSize),
		NumNodes:      p.int(EnvNumNodes),
		MasterAddr:    p.str(EnvMasterAddr),
		MasterPort:    p.int(EnvMasterPort),
		InitBatch:     p.int(EnvInitBatch),
		AtomicBatch:   p.int(EnvAtomicBatch),
		AccumSteps:    p.int(EnvAccumSteps),
		Gain:          p.float(EnvGain),
		CheckpointDir: p.str(EnvCheckpointDir),
		ReportAddr:    p.str(EnvReportAddr),
	}
	e.ReportCA, _ = lookup(EnvReportCA)       // optional
	e.ReportToken, _ = lookup(EnvReportToken) // optional
	if f, ok := lookup(EnvReportTokenFile); ok {
		e.ReportTokenFile = f
		tok, err := readTokenFile(f)
		if err != nil {
			return Env{}, err
		}
		e.ReportToken = tok
	}
	e.GPUs = p.ints(EnvCUDADevices, p.str(EnvCUDADevices))
	if cpus, ok := lookup(EnvCPUs); ok {
		e.CPUs = p.ints(EnvCPUs, cpus)
	}
	if p.err != nil {
		return Env{}, p.err
	}
	if err := e.Validate(); err != nil {
		return Env{}, err
	}
	return e, nil
}

// envParser reads variables and keeps the first error.
type envParser struct {
	lookup func(string) (string, bool)
	err    error
}

func (p *envParser) str(name string) string {
	v, ok := p.lookup(name)
	if !ok && p.err == nil {
		p.err = fmt.Errorf("%w: %s is not set", ErrBadEnv, name)
	}
	return v
}

// ints parses a comma-separated list of numbers (empty: none).
func (p *envParser) ints(name, list string) []int {
	if list == "" {
		return nil
	}
	var out []int
	for _, f := range strings.Split(list, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil && p.err == nil {
			p.err = fmt.Errorf("%w: %s %q: %w", ErrBadEnv, name, list, err)
		}
		out = append(out, v)
	}
	return out
}

func (p *envParser) int(name string) int {
	s := p.str(name)
	v, err := strconv.Atoi(s)
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("%w: %s %q: %w", ErrBadEnv, name, s, err)
	}
	return v
}

func (p *envParser) uint(name string) uint64 {
	s := p.str(name)
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("%w: %s %q: %w", ErrBadEnv, name, s, err)
	}
	return v
}

func (p *envParser) float(name string) float64 {
	s := p.str(name)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("%w: %s %q: %w", ErrBadEnv, name, s, err)
	}
	return v
}
