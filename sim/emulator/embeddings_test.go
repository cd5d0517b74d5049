package emulator

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

func norm(v []float64) float64 {
	var s float64
	for _, f := range v {
		s += f * f
	}
	return math.Sqrt(s)
}

func TestEmbeddingsClient(t *testing.T) {
	cfg := DefaultConfig()
	cfg.APIKey = "sk-test"
	cfg.Models = map[string]Price{"text-embedding-3-small": {InputUSDPerMTok: 0.02}, "tiny-embed": {InputUSDPerMTok: 1}}
	cfg.EmbeddingDimensions = map[string]int{"tiny-embed": 8}
	e := start(t, cfg)
	c := openaiClient(t, e)
	ctx := context.Background()
	texts := []string{"The quick brown fox", "jumped over the lazy dog"}

	resp, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: "text-embedding-3-small",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Data) != 2 || resp.Model != "text-embedding-3-small" || resp.Object != "list" {
		t.Fatalf("response %s", resp.RawJSON())
	}
	wantPrompt := testTokenizer.Count(texts[0]) + testTokenizer.Count(texts[1])
	if resp.Usage.PromptTokens != int64(wantPrompt) || resp.Usage.TotalTokens != int64(wantPrompt) {
		t.Errorf("usage %+v, want %d", resp.Usage, wantPrompt)
	}
	for i, d := range resp.Data {
		if d.Index != int64(i) || len(d.Embedding) != 1536 || math.Abs(norm(d.Embedding)-1) > 1e-5 {
			t.Errorf("data[%d]: index %d, %d dimensions, norm %v", i, d.Index, len(d.Embedding), norm(d.Embedding))
		}
	}
	if resp.Data[0].Embedding[0] == resp.Data[1].Embedding[0] {
		t.Error("different inputs, same vector")
	}
	st := settled(t, e)
	if st.PromptTokens != int64(wantPrompt) || st.CompletionTokens != 0 || math.Abs(st.ChargedUSD-float64(wantPrompt)*0.02/1e6) > 1e-15 {
		t.Errorf("stats %+v", st)
	}

	// A string alone, base64, gives the same vector as float: openai-go
	// v3 does not decode base64 itself, so the test does.
	one, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: "text-embedding-3-small", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String(texts[1])},
		EncodingFormat: openai.EmbeddingNewParamsEncodingFormatBase64,
	})
	if err != nil {
		t.Fatal(err)
	}
	var s string
	if err := json.Unmarshal([]byte(one.Data[0].JSON.Embedding.Raw()), &s); err != nil {
		t.Fatalf("base64 embedding %s: %v", one.Data[0].JSON.Embedding.Raw(), err)
	}
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(raw) != 4*1536 {
		t.Fatalf("base64: %d bytes, %v", len(raw), err)
	}
	for i, want := range resp.Data[1].Embedding {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])); got != float32(want) {
			t.Fatalf("component %d: base64 %v, float %v", i, got, want)
		}
	}

	// dimensions truncates and renormalises; a model's own dimension.
	for _, tc := range []struct {
		model string
		dims  int64
		want  int
	}{{"text-embedding-3-small", 256, 256}, {"tiny-embed", 0, 8}} {
		p := openai.EmbeddingNewParams{Model: tc.model, Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokens: []int64{1212, 318, 257}}}
		if tc.dims > 0 {
			p.Dimensions = openai.Int(tc.dims)
		}
		r, err := c.Embeddings.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if v := r.Data[0].Embedding; len(v) != tc.want || math.Abs(norm(v)-1) > 1e-5 || r.Usage.PromptTokens != 3 {
			t.Errorf("%s: %d dimensions (want %d), norm %v, usage %+v", tc.model, len(v), tc.want, norm(v), r.Usage)
		}
	}

	// Errors in OpenAI's shape, through the client.
	for _, tc := range []struct {
		name   string
		p      openai.EmbeddingNewParams
		opts   []option.RequestOption
		status int
		param  string
	}{
		{"unknown model", openai.EmbeddingNewParams{Model: "nope", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")}}, nil, 404, ""},
		{"too many dimensions", openai.EmbeddingNewParams{Model: "tiny-embed", Dimensions: openai.Int(9), Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")}}, nil, 400, "dimensions"},
		{"empty input", openai.EmbeddingNewParams{Model: "tiny-embed", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("")}}, nil, 400, "input"},
		{"bad key", openai.EmbeddingNewParams{Model: "tiny-embed", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")}}, []option.RequestOption{option.WithAPIKey("sk-wrong")}, 401, ""},
	} {
		_, err := c.Embeddings.New(ctx, tc.p, tc.opts...)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != tc.status || apiErr.Param != tc.param {
			t.Errorf("%s: %v, want status %d param %q", tc.name, err, tc.status, tc.param)
		}
	}
}

func TestEmbeddingsDeterministic(t *testing.T) {
	get := func(seed int64, path, body string, header ...string) []byte {
		cfg := DefaultConfig()
		cfg.Seed = seed
		cfg.EmbeddingDimensions = map[string]int{"m": 16}
		cfg.Deployments = map[string]string{"dep": "m"}
		e := start(t, cfg)
		return readAll(t, do(t, newClient(t), "POST", e.URL()+path, body, header...), 200)
	}
	const b = `{"model":"m","input":["alpha","beta","gamma"]}`
	first, again := get(1, "/v1/embeddings", b), get(1, "/v1/embeddings", b)
	if string(first) != string(again) {
		t.Errorf("same seed, different answers:\n%s\n%s", first, again)
	}
	if other := get(2, "/v1/embeddings", b); string(other) == string(first) {
		t.Error("a different seed gave the same vectors")
	}
	azure := get(1, "/openai/deployments/dep/embeddings?api-version=2024-10-21", `{"input":["alpha","beta","gamma"]}`)
	if string(azure) != string(first) {
		t.Errorf("Azure deployment of the same model, different answer:\n%s\n%s", azure, first)
	}
	var doc struct {
		Data []struct {
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(first, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Data) != 3 || doc.Data[0].Embedding[0] == doc.Data[1].Embedding[0] || doc.Data[1].Embedding[0] == doc.Data[2].Embedding[0] {
		t.Errorf("vectors not distinct: %s", first)
	}
}

func TestEmbeddingsBadInput(t *testing.T) {
	e := start(t, DefaultConfig())
	c := newClient(t)
	url := e.URL() + "/v1/embeddings"
	for _, tc := range []struct{ body, param string }{
		{`{"model":"m","input":`, ""},
		{`[1]`, ""},
		{`{"input":"x"}`, "model"},
		{`{"model":"m"}`, "input"},
		{`{"model":"m","input":[]}`, "input"},
		{`{"model":"m","input":[""]}`, "input[0]"},
		{`{"model":"m","input":[[]]}`, "input[0]"},
		{`{"model":"m","input":["a",[1]]}`, "input"},
		{`{"model":"m","input":{"a":1}}`, "input"},
		{`{"model":"m","input":"x","encoding_format":"int8"}`, "encoding_format"},
		{`{"model":"m","input":"x","dimensions":0}`, "dimensions"},
		{`{"model":"m","input":"x","dimensions":"8"}`, "dimensions"},
		{`{"model":7,"input":"x"}`, "model"},
		{`{"model":"m","input":["` + strings.Repeat("x,", 1) + `"` + strings.Repeat(`,"x"`, 2048) + `]}`, "input"},
	} {
		wantError(t, do(t, c, "POST", url, tc.body), 400, "invalid_request_error", tc.param, "")
	}
	if st := settled(t, e); st.PromptTokens != 0 {
		t.Errorf("refused requests charged: %+v", st)
	}
}
