package route

// The cost on every answer: X-LLMesh-Cost on a whole answer's head, a
// final SSE comment (and, asked for, an HTTP trailer) on a stream, and
// usage.cost inside the usage the client asked for, as OpenRouter gives
// it. The figure is the one the attempt's budget hold settles (settled),
// so that what a client is told is what the ledger counts.

import (
	"bytes"
	"math"
	"net/http"
	"strconv"
	"unsafe"
)

// HeaderCost names the actual cost of an answer in USD, rounded to the
// nano-dollar ("0.000123", "0" for an answer that cost nothing).
const HeaderCost = "X-Llmesh-Cost"

// costComment opens the SSE comment that carries a stream's cost: every
// SSE client ignores a line that starts with a colon.
const costComment = ": X-LLMesh-Cost: "

// toldCost is what an answer tells its client it cost when its attempt
// went as r: what the attempt settles, and what the request's attempts
// before it that did not answer settled (a provider that accepted the
// request and broke off its answer is charged, since it may bill).
// Together they are what the request's budget holds settle, to the
// nano-dollar.
func (c *call) toldCost(r Report) float64 {
	cost, _ := settledCost(c.t, r)
	if c.charged == 0 {
		return cost
	}
	return float64(costNanos(cost)+c.charged) / 1e9
}

// costNanos is usd in billionths of a dollar, rounded as the ledger
// rounds a settled cost (consensus.RoundNanos).
func costNanos(usd float64) int64 {
	if usd <= 0 || math.IsNaN(usd) {
		return 0
	}
	return int64(math.Round(usd * 1e9))
}

// AppendCost appends usd as decimal dollars with at most nine fractional
// digits and no trailing zeros: a JSON number, and X-LLMesh-Cost's value.
func AppendCost(dst []byte, usd float64) []byte {
	n := costNanos(usd)
	dst = strconv.AppendInt(dst, n/1e9, 10)
	frac := n % 1e9
	if frac == 0 {
		return dst
	}
	var digits [10]byte
	digits[0] = '.'
	for i := 9; i >= 1; i-- {
		digits[i] = byte('0' + frac%10)
		frac /= 10
	}
	end := 10
	for digits[end-1] == '0' {
		end--
	}
	return append(dst, digits[:end]...)
}

// FormatCost is AppendCost as a string.
func FormatCost(usd float64) string { return string(AppendCost(nil, usd)) }

// AppendCostComment appends the SSE comment that tells a stream's client
// its cost (": X-LLMesh-Cost: 0.000123" and a blank line). A stream
// carries it once, after its content and before data: [DONE] (or after
// a Responses stream's terminal event).
func AppendCostComment(dst []byte, usd float64) []byte {
	dst = append(dst, costComment...)
	return append(AppendCost(dst, usd), "\n\n"...)
}

// IsCostComment reports whether an SSE event block (its lines without
// the blank line that ends it) is the cost comment: a cache replaying a
// stream drops it and appends its own.
func IsCostComment(event []byte) bool { return bytes.HasPrefix(event, []byte(costComment)) }

// SetCostTrailer sets the cost as an HTTP trailer of the answer whose
// header is h (net/http sends it after the body); clients that sent TE:
// trailers read it there.
func SetCostTrailer(h http.Header, usd float64) {
	h[http.TrailerPrefix+HeaderCost] = []string{FormatCost(usd)}
}

// WithUsageCost sets "cost" (usd) in the top-level "usage" object of the
// JSON object data, replacing one there, building the result in dst
// (whose bytes it overwrites); false, and dst untouched, when data has no
// usage object. A cache hit, which costs nothing, is marked so.
func WithUsageCost(dst, data []byte, usd float64) ([]byte, bool) {
	return withModelCost(dst, data, "", usd, true)
}

// splice is one edit of an answer: data[start:end] replaced by the
// model's name, or by the cost (with its member name and a comma before
// it when it is added to an object that has members).
type splice struct {
	start, end int
	model      string // the replacement is this name, as a JSON string
	key, comma bool   // the cost is added: `"cost":`, after a comma
}

// withModelCost is withModel (name "" renames nothing) that, withCost,
// also sets usage.cost to usd in the same pass: the members are walked
// once and the answer copied once, into dst.
func withModelCost(dst, data []byte, name string, usd float64, withCost bool) ([]byte, bool) {
	return withModelCostIn(dst, data, nil, name, usd, withCost)
}

// withModelCostIn is withModelCost for an answer whose members doc, from
// scanAnswer(data), already located: the model and usage are not looked
// for again (an embedding's members lie past 20 KB of numbers). A nil
// doc looks for them.
func withModelCostIn(dst, data []byte, doc *answerDoc, name string, usd float64, withCost bool) ([]byte, bool) {
	var edits [2]splice
	n := 0
	if name != "" {
		v, end, ok := 0, 0, false
		if doc != nil {
			v, end, ok = within(data, doc.model)
		}
		if !ok && (doc == nil || doc.model != nil) { // (a doc of another copy)
			if v, ok = topValue(data, `"model"`); ok {
				end = valueEnd(data, v)
			}
		}
		if ok && data[v] == '"' && end > 0 && !(end-v == len(name)+2 && string(data[v+1:end-1]) == name) {
			edits[n] = splice{start: v, end: end, model: name}
			n++
		}
	}
	if withCost {
		v, end, ok := 0, 0, false
		if doc != nil {
			v, end, ok = within(data, doc.usage)
		}
		if !ok && (doc == nil || doc.usage != nil) {
			v, end, ok = usageMember(data)
		}
		if ok {
			if e, ok := usageCostEdit(data, v, end); ok {
				edits[n] = e
				n++
			}
		}
	}
	if n == 0 {
		return dst, false
	}
	if n == 2 && edits[1].start < edits[0].start {
		edits[0], edits[1] = edits[1], edits[0]
	}
	if need := len(data) + len(name) + 48; cap(dst) < need {
		dst = make([]byte, 0, need+need/4)
	}
	dst, at := dst[:0], 0
	for _, e := range edits[:n] {
		dst = append(dst, data[at:e.start]...)
		switch {
		case e.model != "":
			dst = appendJSONString(dst, e.model)
		default:
			if e.comma {
				dst = append(dst, ',')
			}
			if e.key {
				dst = append(dst, `"cost":`...)
			}
			dst = AppendCost(dst, usd)
		}
		at = e.end
	}
	return append(dst, data[at:]...), true
}

// usageCostEdit is the edit of data's top-level usage object,
// data[v:end], that sets its cost: the value of a cost member replaced,
// or one added before the object's closing brace.
func usageCostEdit(data []byte, v, end int) (splice, bool) {
	u := data[v:end]
	if c, ok := topValue(u, `"cost"`); ok {
		if cend := valueEnd(u, c); cend > c {
			return splice{start: v + c, end: v + cend}, true
		}
		return splice{}, false
	}
	i := skipSpace(u, 1)
	brace := v + len(u) - 1 // the object's closing brace
	return splice{start: brace, end: brace, key: true, comma: i < len(u) && u[i] != '}'}, true
}

// within is where v, a part of data (a member's value scanAnswer found),
// lies in it; false for nil or a v elsewhere.
func within(data, v []byte) (start, end int, ok bool) {
	if len(v) == 0 || len(data) == 0 {
		return 0, 0, false
	}
	off := int(uintptr(unsafe.Pointer(&v[0])) - uintptr(unsafe.Pointer(&data[0])))
	if off < 0 || off+len(v) > len(data) {
		return 0, 0, false
	}
	return off, off + len(v), true
}

// usageMember is where the top-level "usage" object of the JSON object
// data lies, if it has one.
func usageMember(data []byte) (start, end int, ok bool) { return objectMember(data, `"usage"`) }

// objectMember is where the value of data's top-level member key
// (quoted) lies, if it is an object.
func objectMember(data []byte, key string) (start, end int, ok bool) {
	v, ok := topValue(data, key)
	if !ok || data[v] != '{' {
		return 0, 0, false
	}
	if end = valueEnd(data, v); end < 0 {
		return 0, 0, false
	}
	return v, end, true
}
