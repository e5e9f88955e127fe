package dashboard

import (
	"net/http"
	"net/url"

	"pollux/actors/server/api"
)

// apiLogs streams a job's worker log (GET PathJob{id}/logs) from the
// API's GET PathJobs/{id}/logs, with the page's query (rank,
// incarnation, follow, tail) and the viewer's token: the API decides
// who may read it (the job's submitter or an admin; a read token gets
// its 403).
func (d *Dashboard) apiLogs(w http.ResponseWriter, r *http.Request) {
	d.stream(w, r, api.PathJobs+"/"+url.PathEscape(r.PathValue("id"))+"/logs", r.URL.Query())
}

// apiEvents streams a job's events (GET PathJob{id}/events) from the
// API's GET PathEvents?job=ID&follow=true as server-sent events; the
// browser's Last-Event-ID header (an EventSource reconnecting) or the
// page's since resumes after the last event it saw.
func (d *Dashboard) apiEvents(w http.ResponseWriter, r *http.Request) {
	q := url.Values{"job": {r.PathValue("id")}, "follow": {"true"}}
	if s := r.URL.Query().Get("since"); s != "" {
		q.Set("since", s)
	}
	d.stream(w, r, api.PathEvents, q)
}

// stream hands r, signed with the viewer's token, to the API at path
// with query q and lets the API write its answer to w as it goes (a
// stream is flushed, and keeps its write deadlines, through w). Only
// the Last-Event-ID header of the browser's request goes along.
func (d *Dashboard) stream(w http.ResponseWriter, r *http.Request, path string, q url.Values) {
	if _, ok := d.authorize(w, r, true); !ok {
		return
	}
	tok, _ := tokenOf(r)
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, (&url.URL{Path: path, RawQuery: q.Encode()}).String(), http.NoBody)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, api.Error{Error: "dashboard: " + err.Error()})
		return
	}
	req.RemoteAddr, req.TLS, req.Host = r.RemoteAddr, r.TLS, r.Host
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		req.Header.Set("Last-Event-ID", id)
	}
	d.cfg.API.ServeHTTP(w, req)
}
