package api

import (
	"encoding/json"
	"net/http"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"pollux/actors/jobspec"
	"pollux/consensus/state"
)

// PathOpenAPI serves the OpenAPI 3 document of the API.
const PathOpenAPI = "/v1/openapi.json"

// operation documents one route: what it does, the JSON body it reads
// (nil: none; a []byte: raw bytes) and the one it answers with on
// success (code).
type operation struct {
	summary string
	in      any
	code    int
	out     any
	// text is the media type of a non-JSON answer (out, if set, is
	// then the schema of each of its lines).
	text string
	// query names the query parameters (strings) and stream the media
	// type of the answer's streamed form, if any.
	query  []string
	stream string
}

// operations document every route of New, keyed by its pattern. The
// OpenAPI document is made from them, and a test checks them against
// the routes the API really serves.
var operations = map[string]operation{
	"POST " + PathJobs:                             {summary: "Submit a job (its spec, YAML or JSON; the job's name is its id). A retry with the Idempotency-Key header of a submission that committed answers as it did", in: jobspec.Spec{}, code: http.StatusCreated, out: map[string]string{}},
	"GET " + PathJobs:                              {summary: "List the jobs, oldest first", code: http.StatusOK, out: []Job{}},
	"GET " + PathJobs + "/{id}":                    {summary: "One job with its latest bid (throughput model and batch configurations)", code: http.StatusOK, out: Job{}},
	"POST " + PathJobs + "/{id}/cancel":            {summary: "Cancel a job (its submitter or an admin). A retry with the Idempotency-Key header of the cancel that finished it answers as it did", code: http.StatusOK, out: CancelResult{}},
	"GET " + PathJobs + "/{id}/logs":               logsOperation,
	"GET " + PathNodes:                             {summary: "List the nodes with their GPUs in use", code: http.StatusOK, out: []Node{}},
	"GET " + PathStatus:                            {summary: "The cluster in brief: leader, GPUs, jobs by state, last round", code: http.StatusOK, out: Status{}},
	"GET " + PathEvents:                            eventsOperation,
	"GET /metrics":                                 {summary: "Prometheus metrics of this server", code: http.StatusOK, text: "text/plain"},
	"GET " + PathPeers:                             {summary: "List the Raft servers", code: http.StatusOK, out: []Peer{}},
	"POST " + PathPeers:                            {summary: "Make a running server a voter", in: AddPeer{}, code: http.StatusOK, out: map[string]string{}},
	"DELETE " + PathPeers + "/{id}":                {summary: "Remove a server from the Raft configuration", code: http.StatusOK, out: map[string]string{}},
	"GET " + PathACLTokens:                         {summary: "List the API tokens (without their secrets)", code: http.StatusOK, out: []Token{}},
	"POST " + PathACLTokens:                        {summary: "Create a token; the answer holds its secret, shown once", in: NewToken{}, code: http.StatusCreated, out: Token{}},
	"POST " + PathACLTokens + "/{accessor}/revoke": {summary: "Revoke a token", code: http.StatusOK, out: Token{}},
	"GET " + PathACLSelf:                           {summary: "The token of the request", code: http.StatusOK, out: Token{}},
	"POST " + PathACLBootstrap:                     {summary: "Create the first admin token, once (needs a client certificate of the cluster CA)", in: Bootstrap{}, code: http.StatusCreated, out: Token{}},
	"GET " + PathACLQuotas:                         {summary: "The submitters' quotas and the cluster's state budget", code: http.StatusOK, out: Quotas{}},
	"POST " + PathACLQuotas:                        {summary: "Set a submitter's quota or the state budget (admin)", in: SetQuota{}, code: http.StatusOK, out: SetQuota{}},
	"GET " + PathSnapshot:                          {summary: "A backup of the replicated state (the leader's)", code: http.StatusOK, text: "application/octet-stream"},
	"PUT " + PathSnapshot:                          {summary: "Replace the replicated state with a backup (the Raft membership stays)", in: []byte{}, code: http.StatusOK, out: Restored{}},
	"GET " + PathOpenAPI:                           {summary: "This document", code: http.StatusOK, out: map[string]any{}},
}

// eventsOperation documents GET PathEvents.
var eventsOperation = operation{summary: "The cluster's events (of one job with job=ID) after sequence number since=SEQ; with follow=true or " +
	"Accept: text/event-stream, a stream of server-sent events (id: the sequence number; resume with Last-Event-ID), which ends when a " +
	"followed job has finished", code: http.StatusOK, out: Events{}, query: []string{"job", "since", "follow"}, stream: "text/event-stream"}

// logsOperation documents GET PathJobs/{id}/logs.
var logsOperation = operation{summary: "A worker's log, one JSON object a line; the job's submitter or an admin. incarnation=N " +
	"(default: the newest with a log; with follow, the newer ones as they start), rank=R (default 0), follow=true (stream new " +
	"lines as they are written, until the worker exits), tail=N (start at the N-th line from the end)",
	code: http.StatusOK, text: "application/x-ndjson", out: LogLine{}, query: []string{"incarnation", "rank", "follow", "tail"}}

// roleNames name the roles in the document.
var roleNames = map[state.Role]string{roleBootstrap: "none (client certificate)", state.RoleRead: "read", state.RoleSubmit: "submit", state.RoleAdmin: "admin"}

var pathParam = regexp.MustCompile(`\{([a-z_]+)\}`)

// openAPI is the API's OpenAPI 3 document, as JSON, of operations with
// the roles of needs (a route's pattern to the role it needs; see New).
func openAPI(needs map[string]state.Role) []byte {
	g := schemaGen{names: map[reflect.Type]string{}, schemas: map[string]any{}}
	paths := map[string]map[string]any{}
	patterns := make([]string, 0, len(operations))
	for p := range operations {
		patterns = append(patterns, p)
	}
	sort.Strings(patterns)
	for _, pattern := range patterns {
		op := operations[pattern]
		method, path, _ := strings.Cut(pattern, " ")
		o := map[string]any{
			"summary":     op.summary,
			"operationId": operationID(method, path),
			"responses":   map[string]any{},
		}
		need, ok := needs[pattern]
		if ok {
			o["x-pollux-role"] = roleNames[need]
			if need == roleBootstrap {
				o["security"] = []any{}
			}
		}
		var params []any
		for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
			params = append(params, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
		}
		for _, name := range op.query {
			params = append(params, map[string]any{"name": name, "in": "query", "required": false, "schema": map[string]any{"type": "string"}})
		}
		if params != nil {
			o["parameters"] = params
		}
		switch op.in.(type) {
		case nil:
		case []byte:
			o["requestBody"] = map[string]any{"required": true, "content": map[string]any{
				"application/octet-stream": map[string]any{"schema": map[string]any{"type": "string", "format": "binary"}}}}
		default:
			o["requestBody"] = map[string]any{"required": true, "content": map[string]any{
				"application/json": map[string]any{"schema": g.schema(reflect.TypeOf(op.in))}}}
		}
		ok200 := map[string]any{"description": http.StatusText(op.code)}
		switch {
		case op.text != "" && op.out != nil:
			ok200["content"] = map[string]any{op.text: map[string]any{"schema": g.schema(reflect.TypeOf(op.out))}}
		case op.text != "":
			text := map[string]any{"type": "string"}
			if op.text == "application/octet-stream" {
				text["format"] = "binary"
			}
			ok200["content"] = map[string]any{op.text: map[string]any{"schema": text}}
		case op.out != nil:
			content := map[string]any{"application/json": map[string]any{"schema": g.schema(reflect.TypeOf(op.out))}}
			if op.stream != "" {
				content[op.stream] = map[string]any{"schema": map[string]any{"type": "string"}}
			}
			ok200["content"] = content
		}
		errBody := map[string]any{"description": "refused: the body's error says why", "content": map[string]any{
			"application/json": map[string]any{"schema": g.schema(reflect.TypeOf(Error{}))}}}
		o["responses"] = map[string]any{strconv.Itoa(op.code): ok200, "default": errBody}
		if paths[path] == nil {
			paths[path] = map[string]any{}
		}
		paths[path][strings.ToLower(method)] = o
	}
	doc := map[string]any{
		"openapi": "3.0.3",
		"info": map[string]any{"title": "Pollux API", "version": "1",
			"description": "The HTTP JSON API of a Pollux server (docs/security.md: tokens and roles)."},
		"paths": paths,
		"components": map[string]any{
			"schemas":         g.schemas,
			"securitySchemes": map[string]any{"token": map[string]any{"type": "http", "scheme": "bearer"}},
		},
		"security": []any{map[string]any{"token": []any{}}},
	}
	b, _ := json.MarshalIndent(doc, "", "  ") // cannot fail: maps and slices of strings, numbers and booleans
	return b
}

// operationID is a route's name in the document, e.g. get_v1_jobs_id.
func operationID(method, path string) string {
	return strings.ToLower(method) + strings.NewReplacer("/", "_", "{", "", "}", "", ".", "_").Replace(path)
}

// schemaGen makes the JSON schemas of Go types from their json tags,
// naming each struct type once in schemas.
type schemaGen struct {
	names   map[reflect.Type]string
	schemas map[string]any
}

var timeType = reflect.TypeOf(time.Time{})

func (g *schemaGen) schema(t reflect.Type) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case t.Kind() == reflect.Struct:
		return g.ref(t)
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		return map[string]any{"type": "string", "format": "byte"}
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		return map[string]any{"type": "array", "items": g.schema(t.Elem())}
	case t.Kind() == reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem())}
	case t.Kind() == reflect.Bool:
		return map[string]any{"type": "boolean"}
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		s := map[string]any{"type": "integer"}
		if t.Kind() == reflect.Int64 || t.Kind() == reflect.Uint64 || t.Kind() == reflect.Int || t.Kind() == reflect.Uint {
			s["format"] = "int64"
		}
		if t.Kind() >= reflect.Uint {
			s["minimum"] = 0
		}
		return s
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return map[string]any{"type": "number"}
	case t.Kind() == reflect.String:
		return map[string]any{"type": "string"}
	}
	return map[string]any{} // any value
}

// ref names struct t in the schemas (once; a name taken by another
// type gets its package's name in front) and refers to it.
func (g *schemaGen) ref(t reflect.Type) map[string]any {
	name, ok := g.names[t]
	if !ok {
		name = t.Name()
		if _, taken := g.schemas[name]; taken || name == "" {
			name = strings.ReplaceAll(t.PkgPath(), "/", "_") + "_" + name
		}
		g.names[t] = name
		g.schemas[name] = nil // taken while its fields are made
		g.schemas[name] = g.object(t)
	}
	return map[string]any{"$ref": "#/components/schemas/" + name}
}

// object is struct t's schema: its exported fields under their json
// names, embedded structs' fields inline, those without omitempty or
// omitzero required.
func (g *schemaGen) object(t reflect.Type) map[string]any {
	props := map[string]any{}
	var required []string
	var add func(t reflect.Type)
	add = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if !f.IsExported() || tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
				add(f.Type)
				continue
			}
			if name == "" {
				name = f.Name
			}
			props[name] = g.schema(f.Type)
			if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
				required = append(required, name)
			}
		}
	}
	add(t)
	s := map[string]any{"type": "object", "properties": props}
	if required != nil {
		s["required"] = required
	}
	return s
}

func (a *API) openAPIDoc(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(a.openapi)
}
