package route

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// A request's tags label its cost for spend attribution: a team, an
// app, a feature. They come from the X-LLMesh-Tags header and the body's
// metadata.tags (both comma-separated lists; OpenAI's metadata values
// are strings), and are bounded: at most MaxTags tags, each 1 to
// MaxTagBytes bytes of letters, digits and _ - . : / =.
const (
	MaxTags     = 8
	MaxTagBytes = 64
	// HeaderTags is the request header that lists tags.
	HeaderTags = "X-LLMesh-Tags"
)

// ParseTags returns the canonical tag set of a request whose
// X-LLMesh-Tags header is header and whose body is chat (nil: none): the
// union of the header's tags and the body's metadata.tags, sorted,
// without repeats, comma-joined; "" when there are none. Too many tags,
// or a malformed one, is an *InvalidRequestError naming the header or
// the field. The canonical set parses to itself, so a forward carries it
// as a header would.
func ParseTags(header string, chat *ChatRequest) (string, error) {
	var tags []string
	var err error
	if tags, err = splitTags(tags, header, HeaderTags); err != nil {
		return "", err
	}
	if chat != nil {
		if v := chat.member("metadata"); v != nil && v[0] == '{' {
			var md struct {
				Tags json.RawMessage `json:"tags"`
			}
			if json.Unmarshal(v, &md) == nil && len(md.Tags) > 0 && string(md.Tags) != "null" {
				var s string
				if json.Unmarshal(md.Tags, &s) != nil {
					return "", invalid("metadata.tags", "must be a string of comma-separated tags (metadata values are strings)")
				}
				if tags, err = splitTags(tags, s, "metadata.tags"); err != nil {
					return "", err
				}
			}
		}
	}
	slices.Sort(tags)
	tags = slices.Compact(tags)
	if len(tags) > MaxTags {
		return "", invalid(HeaderTags, "%d tags; a request takes at most %d (header and metadata.tags together)", len(tags), MaxTags)
	}
	return strings.Join(tags, ","), nil
}

// splitTags appends the tags of the comma-separated list s to tags; an
// empty s has none. Each is checked; param names where s came from.
func splitTags(tags []string, s, param string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return tags, nil
	}
	for t := range strings.SplitSeq(s, ",") {
		t = strings.TrimSpace(t)
		if err := checkTag(t); err != nil {
			return nil, invalid(param, "%v", err)
		}
		if len(tags) == 2*MaxTags { // enough to refuse, without holding more
			return nil, invalid(param, "more than %d tags", MaxTags)
		}
		tags = append(tags, t)
	}
	return tags, nil
}

// checkTag says what is wrong with tag t, if anything.
func checkTag(t string) error {
	switch {
	case t == "":
		return fmt.Errorf("an empty tag (tags are separated by single commas)")
	case len(t) > MaxTagBytes:
		return fmt.Errorf("tag %.16q... is longer than %d bytes", t, MaxTagBytes)
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("_-.:/=", c) >= 0) {
			return fmt.Errorf("tag %q holds %q; tags are letters, digits and _ - . : / =", t, c)
		}
	}
	return nil
}

// member returns the value of the body's top-level member key, or nil.
func (r *ChatRequest) member(key string) []byte {
	for _, m := range r.members {
		if m.key == key {
			return r.raw[m.vstart:m.vend]
		}
	}
	return nil
}
