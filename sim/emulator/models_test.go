package emulator

import (
	"context"
	"errors"
	"testing"

	"github.com/openai/openai-go/v3"
)

func TestModelGet(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Models = map[string]Price{"gpt-4o": {}}
	cfg.Deployments = map[string]string{"prod": "gpt-4o"}
	e := start(t, cfg)
	c := openaiClient(t, e)
	m, err := c.Models.Get(context.Background(), "gpt-4o")
	if err != nil || m.ID != "gpt-4o" || m.Object != "model" || m.OwnedBy != "emulator" || m.Created != modelsCreated {
		t.Fatalf("model %+v, %v", m, err)
	}
	_, err = c.Models.Get(context.Background(), "gpt-5")
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" {
		t.Errorf("unknown model: %v", err)
	}
	any := start(t, DefaultConfig()) // no Models: any model is served
	ac := openaiClient(t, any)
	if m, err := ac.Models.Get(context.Background(), "org/some-model"); err != nil || m.ID != "org/some-model" {
		t.Errorf("any model: %+v, %v", m, err)
	}
}
