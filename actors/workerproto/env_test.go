package workerproto

import (
	"errors"
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
	want.ReportCA = ""
	kv := want.Environ()
	if strings.Contains(strings.Join(kv, " "), EnvReportCA) {
		t.Errorf("insecure environment names %s: %v", EnvReportCA, kv)
	}
	got, err := ParseEnv(lookupFrom(kv))
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, %v", got, err)
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
		{"bad report addr", EnvReportAddr, "nowhere", EnvReportAddr},
		{"bad job", EnvJobID, "A B", EnvJobID},
		{"relative CA", EnvReportCA, "pollux-ca.pem", EnvReportCA},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var kv []string
			for _, s := range sampleEnv().Environ() {
				if strings.HasPrefix(s, tc.key+"=") {
					if tc.value == "" {
						continue
					}
					s = tc.key + "=" + tc.value
				}
				kv = append(kv, s)
			}
			_, err := ParseEnv(lookupFrom(kv))
			if !errors.Is(err, ErrBadEnv) || !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("ParseEnv = %v, want ErrBadEnv naming %s", err, tc.mention)
			}
		})
	}
}
