package route

import "net/http"

// Header values the node sends unchanged on every answer or upstream
// request, shared by all of them: a one-value slice, whose append (by
// Header.Add) copies it, and never written in place.
var (
	jsonContent   = []string{"application/json"}
	streamContent = []string{"text/event-stream; charset=utf-8"}
	acceptStream  = []string{"text/event-stream"}
	noCache       = []string{"no-cache"}
	noBuffering   = []string{"no"}
)

// headerValues hands out the one-value slices of a message's headers
// from one allocation instead of one each.
type headerValues []string

// set sets h[key] to val, as h[key] = []string{val} would.
func (v *headerValues) set(h http.Header, key, val string) {
	if len(*v) == 0 {
		*v = make(headerValues, 4)
	}
	one := (*v)[:1:1]
	one[0] = val
	h[key] = one
	*v = (*v)[1:]
}

// setRouteHeaders names the provider, replica and calling node, and the
// reason for the choice, with values from vals.
func setRouteHeaders(h http.Header, vals *headerValues, t *Target, node, route string) {
	vals.set(h, "X-Llmesh-Provider", t.Provider())
	vals.set(h, "X-Llmesh-Route", route)
	via := t.Via
	if via == "" {
		via = node
	}
	vals.set(h, "X-Llmesh-Via", via)
	if up := t.Offer.UpstreamModel(); up != t.answerModel() {
		vals.set(h, HeaderUpstreamModel, up)
	}
	if len(t.Offer.Endpoints) > 1 {
		vals.set(h, "X-Llmesh-Replica", t.ReplicaName())
	}
}
