package config

import (
	"path/filepath"
	"time"
)

// resolveLimits applies the limits section: what a client may send and a
// provider may answer, and how many requests wait or run at once.
func resolveLimits(c *File, _ Env, s *Runtime, p *problems) {
	l := &c.Limits
	if l.MaxBodyBytes < 0 {
		p.bad("limits.max_body_bytes", "must not be negative")
	} else if l.MaxBodyBytes > 0 {
		s.MaxBodyBytes = l.MaxBodyBytes
	}
	if l.MaxResponseBytes < 0 {
		p.bad("limits.max_response_bytes", "must not be negative")
	} else if l.MaxResponseBytes > 0 {
		s.Executor.MaxResponseBytes = l.MaxResponseBytes
	}
	for _, v := range []struct {
		field string
		v     int
		dst   *int
	}{
		{"limits.max_event_bytes", l.MaxEventBytes, &s.Executor.MaxEventBytes},
		{"limits.max_header_bytes", l.MaxHeaderBytes, &s.MaxHeaderBytes},
		{"limits.max_messages", l.MaxMessages, &s.MaxMessages},
		{"limits.max_concurrent_per_tenant", l.MaxConcurrentPerTenant, &s.MaxInFlight},
		{"limits.admission_queue", l.AdmissionQueue, &s.AdmissionQueue},
	} {
		if v.v < 0 {
			p.bad(v.field, "must not be negative")
		} else if v.v > 0 {
			*v.dst = v.v
		}
	}
	switch w := time.Duration(l.AdmissionWait); {
	case w < 0:
		p.bad("limits.admission_wait", "must not be negative")
	case w > time.Minute:
		p.bad("limits.admission_wait", "%s is longer than a client should wait to be admitted; at most 1m", w)
	case w > 0:
		s.AdmissionWait = w
	}
	if l.MaxStreamDuration < 0 {
		p.bad("limits.max_stream_duration", "must not be negative")
	} else if l.MaxStreamDuration > 0 {
		s.Executor.MaxStreamDuration = time.Duration(l.MaxStreamDuration)
	}
	if l.MaxAttempts < 0 {
		p.bad("limits.max_attempts", "must not be negative")
	} else if l.MaxAttempts > 0 {
		s.Executor.MaxAttempts = l.MaxAttempts
	}
	switch b := int64(l.StoredResponsesBytes); {
	case b < 0:
		p.bad("limits.stored_responses_bytes", "must not be negative")
	case b > 0 && b < minStoredResponsesBytes:
		p.bad("limits.stored_responses_bytes", "%d bytes is too small to hold responses; at least 1MiB", b)
	case b > 0:
		s.StoredResponsesBytes = b
	}
}

// minStoredResponsesBytes is the least limits.stored_responses_bytes
// may be: a few bridged conversations.
const minStoredResponsesBytes = 1 << 20

// override sets *dst to d when d is set.
func override(dst *time.Duration, d Duration) {
	if d > 0 {
		*dst = time.Duration(d)
	}
}

// resolveTimeouts applies each phase's timeout, upstream and client-side.
func resolveTimeouts(c *File, _ Env, s *Runtime, _ *problems) {
	t := &c.Timeouts
	override(&s.Executor.ConnectTimeout, t.Connect)
	override(&s.Executor.FirstByteTimeout, t.FirstByte)
	override(&s.Executor.ResponseTimeout, t.Response)
	override(&s.Executor.StreamIdleTimeout, t.StreamIdle)
	override(&s.ReadHeader, t.ReadHeader)
	override(&s.ReadBody, t.ReadBody)
	override(&s.ClientWrite, t.ClientWrite)
}

// resolveDrain applies node.drain: the grace must end before the drain.
func resolveDrain(c *File, _ Env, s *Runtime, p *problems) {
	d := &c.Node.Drain
	if d.Grace < 0 {
		p.bad("node.drain.grace", "must not be negative")
	} else if d.Grace > 0 {
		s.DrainGrace = time.Duration(d.Grace)
	}
	override(&s.DrainTimeout, d.Timeout)
	if s.DrainTimeout <= s.DrainGrace {
		p.bad("node.drain.timeout", "must be longer than node.drain.grace (%s)", s.DrainGrace)
	}
}

// resolveOutlier applies outlier detection's settings.
func resolveOutlier(c *File, _ Env, s *Runtime, p *problems) {
	o := &c.Outlier
	if o.ConsecutiveFailures < 0 {
		p.bad("outlier.consecutive_failures", "must not be negative")
	} else if o.ConsecutiveFailures > 0 {
		s.Health.EjectAfter = o.ConsecutiveFailures
	}
	override(&s.Health.BaseEjection, o.BaseEjection)
	override(&s.Health.MaxEjection, o.MaxEjection)
	if s.Health.MaxEjection < s.Health.BaseEjection {
		p.bad("outlier.max_ejection", "must not be shorter than outlier.base_ejection")
	}
}

// resolveProbes applies the probes section: 0 turns probes off.
func resolveProbes(c *File, _ Env, s *Runtime, _ *problems) {
	override(&s.ProbeIdle, c.Probes.Idle)
	if c.Probes.Disabled {
		s.ProbeIdle = 0
	}
}

// resolveAudit places the audit trail: DATA_DIR/audit by default,
// nowhere when disabled.
func resolveAudit(c *File, _ Env, s *Runtime, p *problems) {
	a := &c.Audit
	dir, on := placeDir(p, "audit", a.Disabled, a.Dir, c.Node.DataDir)
	if !on {
		return
	}
	s.AuditDir, s.AuditMaxBytes = dir, 64<<20
	switch {
	case a.MaxFileMB < 0:
		p.bad("audit.max_file_mb", "must not be negative")
	case a.MaxFileMB > 0:
		s.AuditMaxBytes = int64(a.MaxFileMB) << 20
	}
}

// resolveJournal places the spend journal: DATA_DIR/journal by default,
// nowhere when disabled.
func resolveJournal(c *File, _ Env, s *Runtime, p *problems) {
	j := &c.Journal
	dir, on := placeDir(p, "journal", j.Disabled, j.Dir, c.Node.DataDir)
	if !on {
		return
	}
	s.JournalDir, s.JournalFlush = dir, 100*time.Millisecond
	switch f := time.Duration(j.Flush); {
	case f < 0:
		p.bad("journal.flush", "must not be negative")
	case f > time.Second:
		p.bad("journal.flush", "%s is longer than the request path may run ahead of the disk; at most 1s", f)
	case f > 0:
		s.JournalFlush = f
	}
}

// placeDir is where section's files go: its dir, else DATA_DIR/section;
// on is false when the section is disabled (and a dir set as well is a
// problem).
func placeDir(p *problems, section string, disabled bool, dir, dataDir string) (string, bool) {
	if disabled {
		if dir != "" {
			p.bad(section+".dir", "is set but %s.disabled is true: remove one", section)
		}
		return "", false
	}
	if dir == "" {
		dir = filepath.Join(dataDir, section)
	}
	return dir, true
}
