package node

import (
	"github.com/llmesh/llmesh/node/config"
	"github.com/llmesh/llmesh/node/decisions"
	"github.com/llmesh/llmesh/node/tracing"
	"github.com/llmesh/llmesh/route"
)

// newTracer returns the node's tracer, nil unless tracing.otlp_endpoint
// is set.
func (n *Node) newTracer(c *config.Tracing) (*tracing.Tracer, error) {
	if c == nil {
		return nil, nil
	}
	headers := make(map[string]string, len(c.Headers))
	for k, v := range c.Headers {
		headers[k] = v.Reveal()
	}
	return tracing.New(tracing.Config{Endpoint: c.Endpoint, Headers: headers, Ratio: c.Ratio,
		Service: c.Service, Node: n.s.Name, Region: n.s.Region, Version: n.version, Log: n.log, Registerer: n.reg})
}

// endSpan finishes a request's span (nil when not traced) with what
// account knows of it.
func (n *Node) endSpan(sp *tracing.Span, e *decisions.Decision, via string) {
	if sp == nil {
		return
	}
	op := genAIOperation(e.API)
	f := tracing.Finish{Name: op + " " + e.Model, End: e.At.Add(e.Took), Attrs: []tracing.Attr{
		tracing.String("gen_ai.operation.name", op), tracing.String("llmesh.endpoint", e.API.String()), tracing.String("gen_ai.request.model", e.Model),
		tracing.String("llmesh.request_id", e.ID), tracing.String("llmesh.tenant", e.Tenant),
		tracing.String("llmesh.outcome", e.Outcome()),
		tracing.Int("http.response.status_code", int64(e.Status)), tracing.Bool("llmesh.stream", e.Stream),
	}}
	if e.Origin != "" {
		f.Attrs = append(f.Attrs, tracing.String("llmesh.forwarded_by", e.Origin))
	}
	if r := e.Result; r != nil && r.Target != nil {
		f.Attrs = append(f.Attrs, tracing.String("llmesh.provider", e.Provider), tracing.String("llmesh.via", via),
			tracing.Int("gen_ai.usage.input_tokens", int64(r.Usage.PromptTokens)),
			tracing.Int("gen_ai.usage.output_tokens", int64(r.Usage.CompletionTokens)),
			tracing.Float("llmesh.cost_usd", r.Cost), tracing.Int("llmesh.attempts", int64(len(r.Attempts))))
		if r.Replica != "" {
			f.Attrs = append(f.Attrs, tracing.String("llmesh.replica", r.Replica))
		}
		for _, a := range r.Attempts {
			f.Events = append(f.Events, tracing.Event{Name: "attempt", Attrs: []tracing.Attr{
				tracing.String("llmesh.provider", a.Provider), tracing.String("llmesh.outcome", string(a.Outcome)),
				tracing.Int("http.response.status_code", int64(a.Status)), tracing.Int("llmesh.ms", a.Duration.Milliseconds())}})
		}
	}
	switch {
	case e.Err != nil:
		_, ae := classify(e.Err)
		f.Error = ae.Code
	case e.Status >= 500 || (e.Result != nil && e.Result.Truncated):
		f.Error = e.Outcome()
	}
	n.tracer.End(sp, f)
}

// genAIOperation is OpenTelemetry's gen_ai.operation.name of an API.
func genAIOperation(a route.API) string {
	switch a {
	case route.APIEmbeddings:
		return "embeddings"
	case route.APICompletions:
		return "text_completion"
	}
	return "chat"
}
