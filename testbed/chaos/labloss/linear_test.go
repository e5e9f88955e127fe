package labloss

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// labHistory is a lab's client-side history: a submission acknowledged,
// then a linearizable list read answering jobs.
func labHistory(jobs string) string {
	return `{"t":1000,"ev":{"kind":"run_begin","scenario":"lab-loss","seed":1}}
{"t":1100,"op":{"type":"invoke","id":1,"client":0,"f":"submit","server":"s0","job":"a-1"}}
{"t":1200,"op":{"type":"ok","id":1,"client":0,"f":"submit","job":"a-1","code":201}}
{"t":1300,"op":{"type":"invoke","id":2,"client":0,"f":"jobs","server":"s0"}}
{"t":1400,"op":{"type":"ok","id":2,"client":0,"f":"jobs","code":200,"jobs":` + jobs + `}}
{"t":1500,"ev":{"kind":"run_end"}}
`
}

func TestJudgeLinear(t *testing.T) {
	running := `[{"id":"a-1","state":"running","inc":1,"epoch":1,"progress":1}]`
	for _, tc := range []struct {
		name       string
		histories  map[string]string // lab -> history ("" : none written)
		linear     bool
		violations int
		failure    string
	}{
		{"every lab linearizable", map[string]string{"lab-a": labHistory(running), "lab-b": labHistory(running)}, true, 0, ""},
		{"an acknowledged job missing from a read", map[string]string{"lab-a": labHistory(running), "lab-b": labHistory(`[]`)}, false, 1,
			"violation: lab-b: linearizable: job a-1"},
		{"a lab without its history", map[string]string{"lab-a": labHistory(running), "lab-b": ""}, false, 0, "lab-b: API history"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dirs := map[string]string{}
			var labs []string
			for lab, h := range tc.histories {
				dirs[lab] = t.TempDir()
				labs = append(labs, lab)
				if h != "" {
					if err := os.WriteFile(filepath.Join(dirs[lab], "history.jsonl"), []byte(h), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			res := &Result{}
			judgeLinear(res, labs, func(lab string) string { return dirs[lab] }, 0)
			if res.Linearizable != tc.linear || res.Violations != tc.violations || tc.linear && res.LinearOps != 4 {
				t.Errorf("linearizable %v, %d violations, %d operations: %v", res.Linearizable, res.Violations, res.LinearOps, res.Failures)
			}
			if tc.failure == "" && len(res.Failures) > 0 || tc.failure != "" && (len(res.Failures) != 1 || !strings.Contains(res.Failures[0], tc.failure)) {
				t.Errorf("failures %v, want one saying %q", res.Failures, tc.failure)
			}
		})
	}
}
