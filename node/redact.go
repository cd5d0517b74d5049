package node

import (
	"encoding/base64"

	"github.com/llmesh/llmesh/node/config"
	"github.com/llmesh/llmesh/route"
)

// newRedactor returns the redactor of every credential of s: the one
// redaction point for what the node logs and answers.
func newRedactor(s *config.Runtime) *route.Redactor {
	list := []string{s.AdminToken.Reveal(), s.RPCToken}
	for _, p := range s.Providers {
		list = append(list, p.APIKey.Reveal())
	}
	if s.Gossip != nil && len(s.Gossip.SecretKey) > 0 {
		list = append(list, base64.StdEncoding.EncodeToString(s.Gossip.SecretKey), string(s.Gossip.SecretKey))
	}
	if s.Tracing != nil {
		for _, v := range s.Tracing.Headers {
			list = append(list, v.Reveal())
		}
	}
	return route.NewRedactor(list...)
}
