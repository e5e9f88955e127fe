package api

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// served is the document GET PathOpenAPI answers, checked as OpenAPI 3.
func served(t *testing.T, a *API) *openapi3.T {
	t.Helper()
	code, body := doAs(a, readSecret, "GET", PathOpenAPI, "")
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", PathOpenAPI, code, body)
	}
	doc, err := openapi3.NewLoader().LoadFromData([]byte(body))
	if err != nil {
		t.Fatalf("the document does not load: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the document is not valid OpenAPI 3: %v", err)
	}
	return doc
}

// TestOpenAPIMatchesTheRoutes checks the served document against the
// routes the API registers: every route documented with the role it
// needs, no documented operation the API does not serve.
func TestOpenAPIMatchesTheRoutes(t *testing.T) {
	a, _ := newTest()
	doc := served(t, a)
	documented := map[string]*openapi3.Operation{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			documented[method+" "+path] = op
		}
	}
	var registered []string
	for _, rt := range a.routes {
		registered = append(registered, rt.pattern)
		op := documented[rt.pattern]
		if op == nil {
			t.Errorf("route %s is missing from the document", rt.pattern)
			continue
		}
		if got := op.Extensions["x-pollux-role"]; got != roleNames[rt.need] {
			t.Errorf("%s: documented role %v, want %s", rt.pattern, got, roleNames[rt.need])
		}
		if op.Summary == "" || op.Responses.Default() == nil {
			t.Errorf("%s: no summary or no error answer documented", rt.pattern)
		}
	}
	for pattern := range documented {
		if !slices.Contains(registered, pattern) {
			t.Errorf("documented %s is not a route of the API (stale)", pattern)
		}
	}
	// Every documented operation reaches a handler: the mux answers
	// neither its own 404 nor 405.
	for pattern := range documented {
		method, path, body := concrete(pattern)
		code, out := doAs(a, adminSecret, method, path, body)
		if code == http.StatusMethodNotAllowed || (code == http.StatusNotFound && !strings.HasPrefix(out, "{")) {
			t.Errorf("%s %s: %d %q: not served", method, path, code, out)
		}
	}
}

// TestOpenAPISchemas checks that the schemas follow the JSON the API
// writes: a job's fields, with the required ones marked.
func TestOpenAPISchemas(t *testing.T) {
	a, _ := newTest()
	doc := served(t, a)
	job := doc.Components.Schemas["Job"]
	if job == nil {
		t.Fatal("no Job schema")
	}
	b, err := json.Marshal(Job{})
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	for name := range fields {
		if job.Value.Properties[name] == nil {
			t.Errorf("Job's field %q is not in the schema", name)
		}
		if !slices.Contains(job.Value.Required, name) {
			t.Errorf("Job's field %q, always written, is not required", name)
		}
	}
	for name := range job.Value.Properties {
		if _, ok := fields[name]; !ok && slices.Contains(job.Value.Required, name) {
			t.Errorf("Job's field %q is required but left out when empty", name)
		}
	}
	sub := doc.Paths.Find(PathJobs).Post.RequestBody.Value.Content.Get("application/json").Schema
	if sub.Ref != "#/components/schemas/Spec" {
		t.Errorf("a submission's body is %q, want the job spec", sub.Ref)
	}
}
