package workerproto

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func sampleEnv() Env {
	return Env{
		JobID: "cifar10-a", Incarnation: 7, Rank: 3, LocalRank: 1, WorldSize: 4, NumNodes: 2,
		MasterAddr: "127.0.0.1", MasterPort: 29500, GPUs: []int{2, 3},
		InitBatch: 128, AtomicBatch: 256, AccumSteps: 1, Gain: 3.25,
		CheckpointDir: "/tmp/ckpt", ReportAddr: "127.0.0.1:7070", ReportCA: "/etc/pollux/pollux-ca.pem",
		ReportToken: ReportToken([]byte("k"), "cifar10-a", 7, 3),
	}
}

func lookupFrom(kv []string) func(string) (string, bool) {
	m := map[string]string{}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		m[k] = v
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestEnvRoundTrip(t *testing.T) {
	want := sampleEnv()
	kv := want.Environ()
	got, err := ParseEnv(lookupFrom(kv))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, k := range []string{"RANK=3", "WORLD_SIZE=4", "MASTER_PORT=29500", "CUDA_VISIBLE_DEVICES=2,3"} {
		if !strings.Contains(strings.Join(kv, " "), k) {
			t.Errorf("environment lacks %s", k)
		}
	}
}

func TestEnvWithoutReportCA(t *testing.T) {
	want := sampleEnv()
	want.ReportCA, want.ReportToken = "", ""
	kv := want.Environ()
	if s := strings.Join(kv, " "); strings.Contains(s, EnvReportCA) || strings.Contains(s, EnvReportToken) {
		t.Errorf("environment names %s or %s: %v", EnvReportCA, EnvReportToken, kv)
	}
	got, err := ParseEnv(lookupFrom(kv))
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, %v", got, err)
	}
}

func TestEnvCPUSlotRoundTrip(t *testing.T) {
	want := sampleEnv()
	want.GPUs, want.CPUs = nil, []int{4, 5}
	kv := want.Environ()
	got, err := ParseEnv(lookupFrom(kv))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	joined := strings.Join(kv, " ")
	for _, k := range []string{"POLLUX_CPUS=4,5", "OMP_NUM_THREADS=2", "CUDA_VISIBLE_DEVICES= "} {
		if !strings.Contains(joined+" ", k) {
			t.Errorf("environment lacks %q: %s", k, joined)
		}
	}
	if strings.Contains(strings.Join(sampleEnv().Environ(), " "), EnvCPUs) {
		t.Errorf("a GPU worker's environment names %s", EnvCPUs)
	}
}

func TestParseEnvRejects(t *testing.T) {
	tests := []struct {
		name, key, value, mention string
	}{
		{"missing", EnvReportAddr, "", EnvReportAddr},
		{"not a number", EnvRank, "one", EnvRank},
		{"rank too big", EnvRank, "4", EnvRank},
		{"nodes above world", EnvNumNodes, "5", EnvNumNodes},
		{"bad gain", EnvGain, "NaN", EnvGain},
		{"bad devices", EnvCUDADevices, "0,x", EnvCUDADevices},
		{"bad cpus", EnvCPUs, "0,,1", EnvCPUs},
		{"negative cpu", EnvCPUs, "-1", EnvCPUs},
		{"bad report addr", EnvReportAddr, "nowhere", EnvReportAddr},
		{"bad job", EnvJobID, "A B", EnvJobID},
		{"relative CA", EnvReportCA, "pollux-ca.pem", EnvReportCA},
		{"huge token", EnvReportToken, strings.Repeat("t", MaxTokenBytes+1), EnvReportToken},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var kv []string
			found := false
			for _, s := range sampleEnv().Environ() {
				if strings.HasPrefix(s, tc.key+"=") {
					found = true
					if tc.value == "" {
						continue
					}
					s = tc.key + "=" + tc.value
				}
				kv = append(kv, s)
			}
			if !found {
				kv = append(kv, tc.key+"="+tc.value)
			}
			_, err := ParseEnv(lookupFrom(kv))
			if !errors.Is(err, ErrBadEnv) || !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("ParseEnv = %v, want ErrBadEnv naming %s", err, tc.mention)
			}
		})
	}
}

// TestEnvReportTokenFile: with a token file the environment names the
// file, never the token, and ParseEnv reads the token from it; a
// missing, relative or oversized file is refused.
func TestEnvReportTokenFile(t *testing.T) {
	want := sampleEnv()
	want.ReportTokenFile = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(want.ReportTokenFile, []byte(want.ReportToken+"\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	kv := want.Environ()
	if s := strings.Join(kv, " "); strings.Contains(s, EnvReportToken+"=") || strings.Contains(s, want.ReportToken) {
		t.Fatalf("environment carries the token: %v", kv)
	}
	got, err := ParseEnv(lookupFrom(kv))
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, %v", got, err)
	}
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, []byte(strings.Repeat("x", MaxTokenBytes+5)), 0o400); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, mention string }{
		{filepath.Join(t.TempDir(), "none"), "no such file"},
		{"token", "not an absolute path"},
		{big, "bytes, at most"},
	} {
		bad := want
		bad.ReportTokenFile = tc.file
		_, err := ParseEnv(lookupFrom(bad.Environ()))
		if !errors.Is(err, ErrBadEnv) || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: %v, want a refusal mentioning %q", tc.file, err, tc.mention)
		}
	}
}
