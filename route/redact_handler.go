package route

import (
	"context"
	"fmt"
	"log/slog"
)

// Handler returns a log handler that passes every record through r to h:
// its message and every attribute's text, including errors and the
// attributes of groups and of With. Records holding no secret pass as
// they are, without a copy; the nil Redactor returns h itself.
func (r *Redactor) Handler(h slog.Handler) slog.Handler {
	if r == nil {
		return h
	}
	return redactHandler{h, r}
}

type redactHandler struct {
	h   slog.Handler
	red *Redactor
}

func (r redactHandler) Enabled(ctx context.Context, l slog.Level) bool { return r.h.Enabled(ctx, l) }

func (r redactHandler) Handle(ctx context.Context, rec slog.Record) error {
	// Most records hold no secret: they pass as they are, without a copy.
	dirty := r.red.Redact(rec.Message) != rec.Message
	rec.Attrs(func(a slog.Attr) bool {
		dirty = dirty || r.holdsSecret(a)
		return !dirty
	})
	if !dirty {
		return r.h.Handle(ctx, rec)
	}
	out := slog.NewRecord(rec.Time, rec.Level, r.red.Redact(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(r.redactAttr(a))
		return true
	})
	return r.h.Handle(ctx, out)
}

func (r redactHandler) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = r.redactAttr(a)
	}
	return redactHandler{r.h.WithAttrs(red), r.red}
}

func (r redactHandler) WithGroup(name string) slog.Handler {
	return redactHandler{r.h.WithGroup(name), r.red}
}

// holdsSecret reports whether redactAttr would change a.
func (r redactHandler) holdsSecret(a slog.Attr) bool {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindString {
		s := v.String()
		return r.red.Redact(s) != s
	}
	if v.Kind() == slog.KindGroup {
		for _, ga := range v.Group() {
			if r.holdsSecret(ga) {
				return true
			}
		}
		return false
	}
	red := r.redactAttr(a)
	return red.Value.Kind() == slog.KindString && v.Kind() != slog.KindString
}

func (r redactHandler) redactAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	text := ""
	switch v.Kind() {
	case slog.KindString:
		text = v.String()
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			text = x.Error()
		case fmt.Stringer:
			text = x.String()
		case []string, []any, map[string]any:
			text = fmt.Sprint(x)
		default:
			return slog.Attr{Key: a.Key, Value: v}
		}
	case slog.KindGroup:
		g := v.Group()
		red := make([]any, len(g))
		for i, ga := range g {
			red[i] = r.redactAttr(ga)
		}
		return slog.Group(a.Key, red...)
	default:
		return slog.Attr{Key: a.Key, Value: v}
	}
	// Only text that holds a secret changes (and then becomes a string).
	if red := r.red.Redact(text); red != text {
		return slog.String(a.Key, red)
	}
	return slog.Attr{Key: a.Key, Value: v}
}
