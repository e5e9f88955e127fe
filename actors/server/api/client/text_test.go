package client_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"

	"pollux/actors/server/api"
	"pollux/actors/server/api/client"
)

var update = flag.Bool("update", false, "rewrite the .txt files of testdata from the writers' output")

// writeAs decodes testdata/NAME.json (strictly) as a T and writes it with
// write.
func writeAs[T any](write func(io.Writer, T) error) func(*testing.T, []byte, io.Writer) error {
	return func(t *testing.T, data []byte, w io.Writer) error {
		var v T
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		return write(w, v)
	}
}

// TestWriters prints recorded answers of the API (testdata/*.json) as the
// CLI does and compares them with testdata/*.txt.
func TestWriters(t *testing.T) {
	for name, write := range map[string]func(*testing.T, []byte, io.Writer) error{
		"status":        writeAs(client.WriteStatus),
		"status-plain":  writeAs(client.WriteStatus),
		"job":           writeAs(client.WriteJob),
		"job-nobid":     writeAs(client.WriteJob),
		"nodes":         writeAs(client.WriteNodes),
		"tokens":        writeAs(client.WriteTokens),
		"token-new":     writeAs(client.WriteToken),
		"token-revoked": writeAs(client.WriteToken),
	} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := write(t, data, &out); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", name+".txt")
			if *update {
				if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if out.String() != string(want) {
				t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
			}
		})
	}
}

// failing is a writer that fails after n bytes.
type failing struct{ n int }

func (f *failing) Write(p []byte) (int, error) {
	if len(p) > f.n {
		return 0, io.ErrShortWrite
	}
	f.n -= len(p)
	return len(p), nil
}

// TestWritersReportWriteErrors: a writer's failure comes back, wherever
// it happens.
func TestWritersReportWriteErrors(t *testing.T) {
	job := api.Job{ID: "j", Bid: &api.BidJSON{Single: []api.ChoiceJSON{{LocalBatch: 1}}}}
	st := api.Status{Jobs: map[string]int{}, Autoscale: &api.AutoscaleJSON{}}
	for name, write := range map[string]func(io.Writer) error{
		"job":    func(w io.Writer) error { return client.WriteJob(w, job) },
		"status": func(w io.Writer) error { return client.WriteStatus(w, st) },
		"token":  func(w io.Writer) error { return client.WriteToken(w, api.Token{Secret: "plx_s"}) },
		"tokens": func(w io.Writer) error { return client.WriteTokens(w, []api.Token{{Name: "a"}}) },
		"nodes":  func(w io.Writer) error { return client.WriteNodes(w, []api.Node{{ID: "n1"}}) },
		"jobs":   func(w io.Writer) error { return client.WriteJobs(w, []api.Job{job}) },
		"peers": func(w io.Writer) error {
			return client.WritePeers(w, []api.Peer{{ID: "s1", Voter: true, Rack: "r1"}, {ID: "s2", Voter: true, Rack: "r1"}})
		},
	} {
		var all bytes.Buffer
		if err := write(&all); err != nil {
			t.Fatal(err)
		}
		size := all.Len()
		for _, n := range []int{0, size / 2, size - 1} {
			if err := write(&failing{n: n}); err != io.ErrShortWrite {
				t.Errorf("%s failing after %d of %d bytes: %v", name, n, size, err)
			}
		}
		if err := write(&failing{n: size}); err != nil {
			t.Errorf("%s with room for its %d bytes: %v", name, size, err)
		}
	}
}
