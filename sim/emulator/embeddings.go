package emulator

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"strconv"
)

// embeddingRequest is a CreateEmbeddingRequest as far as the emulator reads
// it.
type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat *string         `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	User           string          `json:"user"`
}

// embeddings answers POST /v1/embeddings and its Azure path: one vector per
// input, a function of the seed, the model and the input alone (not of
// the order of requests), of unit length, as floats or as base64 of
// little-endian float32s. It waits TTFT before answering, as the time the
// model takes.
func (x *exchange) embeddings(body []byte) {
	if !x.admit() {
		return
	}
	var req embeddingRequest
	if aerr := decodeBody(body, &req); aerr != nil {
		x.fail(aerr)
		return
	}
	model := x.model(req.Model)
	if model == "" {
		x.fail(invalidParam("model", "Missing required parameter: 'model'."))
		return
	}
	inputs, aerr := readPrompts(req.Input, "input")
	if aerr != nil {
		x.fail(aerr)
		return
	}
	base64Format := false
	if f := req.EncodingFormat; f != nil {
		switch *f {
		case "float":
		case "base64":
			base64Format = true
		default:
			x.fail(invalidParam("encoding_format", "Invalid value: '"+*f+"'. Supported values are: 'float' and 'base64'."))
			return
		}
	}
	if !x.served(model) {
		return
	}
	full := x.cfg.embeddingDimensions(model)
	dims := full
	if req.Dimensions != nil {
		if dims = *req.Dimensions; dims < 1 || dims > full {
			x.fail(invalidParam("dimensions", "dimensions must be between 1 and "+strconv.Itoa(full)+" for model "+model+", got "+strconv.Itoa(dims)+"."))
			return
		}
	}
	if x.unlucky() {
		return
	}
	prompt := x.countPrompts(inputs)
	defer func() { x.e.rec.charge(prompt, 0, x.cfg.cost(model, prompt, 0)) }()
	if !x.pace.until(x.arrived.Add(x.cfg.Latency + x.cfg.TTFT)) {
		return
	}
	bp := x.e.buffer()
	defer x.e.release(bp)
	*bp = appendEmbeddings((*bp)[:0], x.cfg.Seed, model, inputs, dims, base64Format, prompt)
	x.answerOK(*bp)
}

// appendEmbeddings appends the CreateEmbeddingResponse.
func appendEmbeddings(b []byte, seed int64, model string, inputs []promptInput, dims int, base64Format bool, prompt int) []byte {
	vec := make([]float32, dims)
	var raw []byte
	b = append(b, `{"object":"list","data":[`...)
	for i := range inputs {
		if i > 0 {
			b = append(b, ',')
		}
		embedding(vec, seed, model, inputs[i].key())
		b = append(b, `{"object":"embedding","index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"embedding":`...)
		if base64Format {
			raw = raw[:0]
			for _, f := range vec {
				raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(f))
			}
			b = append(b, '"')
			b = base64.StdEncoding.AppendEncode(b, raw)
			b = append(b, '"')
		} else {
			b = append(b, '[')
			for j, f := range vec {
				if j > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendFloat(b, float64(f), 'g', -1, 32)
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	b = append(b, `],"model":`...)
	b = appendString(b, model)
	b = append(b, `,"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt), 10)
	return append(b, "}}"...)
}

// embedding fills vec with the first len(vec) components of the vector of
// an input, scaled to unit length: asking for fewer dimensions truncates
// the model's vector and renormalises it, as text-embedding-3 models do.
func embedding(vec []float32, seed int64, model string, input uint64) {
	key := mix(mix(uint64(seed)^fnv(model)) ^ input)
	var sum float64
	vals := make([]float64, len(vec))
	for i := range vals {
		v := float64(int64(mix(key+uint64(i)))) / (1 << 63) // uniform in [-1, 1)
		vals[i] = v
		sum += v * v
	}
	norm := math.Sqrt(sum)
	if norm == 0 {
		norm = 1
	}
	for i, v := range vals {
		vec[i] = float32(v / norm)
	}
}
