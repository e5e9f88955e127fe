package controlplane

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/remote"

	"pollux/cluster/pki"
)

func noRemote(*pki.Credentials, *slog.Logger) ([]remote.ConfigOption, error) { return nil, nil }

func TestServeNodesConfiguration(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr error // nil: any error
	}{
		{name: "not JSON", in: "{nodes", wantErr: ErrConfig},
		{name: "unknown field", in: `{"log_level":"error","insecure":true,"nodez":["n0"]}` + "\n", wantErr: ErrConfig},
		{name: "two objects", in: `{"log_level":"error"} {"insecure":true}` + "\n", wantErr: ErrConfig},
		{name: "empty", in: "", wantErr: ErrConfig},
		{name: "nodes of no GPUs", in: `{"log_level":"error","insecure":true,"names":["n0"],"report_every":50000000}`, wantErr: ErrConfig},
		{name: "bad log level", in: `{"log_level":"loud","insecure":true}`, wantErr: ErrConfig},
		{name: "no gossip key", in: `{"log_level":"error","gossip_key":"/nonexistent/gossip.key"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var out bytes.Buffer
			err := ServeNodes(ctx, strings.NewReader(tt.in), &out, io.Discard, noRemote)
			if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
		})
	}
}

// TestServeNodesStopsWhenInputEnds runs a node process of no nodes: it
// says it is up, then ends when its input does.
func TestServeNodesStopsWhenInputEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- ServeNodes(ctx, inR, outW, io.Discard, noRemote)
		outW.Close()
	}()
	if _, err := io.WriteString(inW, `{"log_level":"error","insecure":true,"report_every":50000000}`+"\n"); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(outR)
	if !sc.Scan() || sc.Text() != `{"up":true}` {
		t.Fatalf("first line %q, want up", sc.Text())
	}
	inW.Close()
	go func() {
		for sc.Scan() {
		}
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("still serving after its input ended")
	}
}

func FuzzReadNodesConfig(f *testing.F) {
	f.Add([]byte(`{"names":["n0000"],"gpus":4,"report_every":50000000,"seeds":["127.0.0.1:1"],"log_level":"error","insecure":true}` + "\n"))
	f.Add([]byte(`{"log_level":"warn","ca":"ca.pem","certs":{"n0":["c","k"]},"gossip_key":"g"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := readNodesConfig(bufio.NewReader(bytes.NewReader(b)))
		if err != nil && !errors.Is(err, ErrConfig) {
			t.Fatalf("error %v is not ErrConfig", err)
		}
		if err == nil && len(cfg.Names) > 0 && cfg.GPUs < 1 {
			t.Fatalf("accepted %d nodes of %d GPUs", len(cfg.Names), cfg.GPUs)
		}
	})
}
