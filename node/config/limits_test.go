package config

import (
	"strings"
	"testing"
	"time"
)

func TestResolveLimits(t *testing.T) {
	testSection(t, resolveLimits, nil, []sectionCase{
		{name: "defaults", want: func(*Runtime) {}},
		{name: "set", edit: func(f *File) {
			f.Limits = LimitsSection{MaxBodyBytes: 1, MaxAttempts: 2, MaxResponseBytes: 3, MaxEventBytes: 4, MaxHeaderBytes: 5,
				MaxMessages: 6, MaxConcurrentPerTenant: 7, MaxStreamDuration: Duration(time.Minute), AdmissionWait: Duration(time.Second), AdmissionQueue: 8,
				StoredResponsesBytes: 9 << 20}
		}, want: func(s *Runtime) {
			s.MaxBodyBytes, s.Executor.MaxAttempts, s.Executor.MaxResponseBytes, s.Executor.MaxEventBytes = 1, 2, 3, 4
			s.MaxHeaderBytes, s.MaxMessages, s.MaxInFlight, s.AdmissionQueue = 5, 6, 7, 8
			s.Executor.MaxStreamDuration, s.AdmissionWait, s.StoredResponsesBytes = time.Minute, time.Second, 9<<20
		}},
		{name: "negative", edit: func(f *File) {
			f.Limits = LimitsSection{MaxBodyBytes: -1, MaxAttempts: -1, MaxResponseBytes: -1, MaxEventBytes: -1, MaxHeaderBytes: -1,
				MaxMessages: -1, MaxConcurrentPerTenant: -1, MaxStreamDuration: -1, AdmissionWait: -1, AdmissionQueue: -1,
				StoredResponsesBytes: -1}
		}, err: strings.Join([]string{"limits.max_body_bytes: must not be negative", "limits.max_response_bytes: must not be negative",
			"limits.max_event_bytes: must not be negative", "limits.max_header_bytes: must not be negative",
			"limits.max_messages: must not be negative", "limits.max_concurrent_per_tenant: must not be negative",
			"limits.admission_queue: must not be negative", "limits.admission_wait: must not be negative",
			"limits.max_stream_duration: must not be negative", "limits.max_attempts: must not be negative",
			"limits.stored_responses_bytes: must not be negative"}, "\n")},
		{name: "stored responses too small", edit: func(f *File) { f.Limits.StoredResponsesBytes = 4096 },
			err: "limits.stored_responses_bytes: 4096 bytes is too small to hold responses; at least 1MiB"},
		{name: "long wait", edit: func(f *File) { f.Limits.AdmissionWait = Duration(2 * time.Minute) },
			err: "limits.admission_wait: 2m0s is longer than a client should wait to be admitted; at most 1m"},
	})
}

func TestResolveTimeouts(t *testing.T) {
	testSection(t, resolveTimeouts, nil, []sectionCase{
		{name: "defaults", want: func(*Runtime) {}},
		{name: "set", edit: func(f *File) {
			f.Timeouts = TimeoutsSection{Connect: 1, FirstByte: 2, Response: 3, StreamIdle: 4, ReadHeader: 5, ReadBody: 6, ClientWrite: 7}
		}, want: func(s *Runtime) {
			s.Executor.ConnectTimeout, s.Executor.FirstByteTimeout, s.Executor.ResponseTimeout, s.Executor.StreamIdleTimeout = 1, 2, 3, 4
			s.ReadHeader, s.ReadBody, s.ClientWrite = 5, 6, 7
		}},
	})
}

func TestResolveDrain(t *testing.T) {
	testSection(t, resolveDrain, nil, []sectionCase{
		{name: "defaults", want: func(*Runtime) {}},
		{name: "set", edit: func(f *File) {
			f.Node.Drain = DrainSection{Grace: Duration(time.Second), Timeout: Duration(time.Minute)}
		},
			want: func(s *Runtime) { s.DrainGrace, s.DrainTimeout = time.Second, time.Minute }},
		{name: "negative grace", edit: func(f *File) { f.Node.Drain.Grace = -1 }, err: "node.drain.grace: must not be negative"},
		{name: "timeout within grace", edit: func(f *File) {
			f.Node.Drain = DrainSection{Grace: Duration(time.Minute), Timeout: Duration(time.Second)}
		},
			err: "node.drain.timeout: must be longer than node.drain.grace (1m0s)"},
	})
}

func TestResolveOutlier(t *testing.T) {
	testSection(t, resolveOutlier, nil, []sectionCase{
		{name: "defaults", want: func(*Runtime) {}},
		{name: "set", edit: func(f *File) {
			f.Outlier = OutlierSection{ConsecutiveFailures: 2, BaseEjection: Duration(time.Second), MaxEjection: Duration(time.Minute)}
		}, want: func(s *Runtime) {
			s.Health.EjectAfter, s.Health.BaseEjection, s.Health.MaxEjection = 2, time.Second, time.Minute
		}},
		{name: "bad", edit: func(f *File) { f.Outlier = OutlierSection{ConsecutiveFailures: -1, MaxEjection: Duration(time.Second)} },
			err: "outlier.consecutive_failures: must not be negative\noutlier.max_ejection: must not be shorter than outlier.base_ejection"},
	})
}

func TestResolveProbes(t *testing.T) {
	testSection(t, resolveProbes, nil, []sectionCase{
		{name: "defaults", want: func(*Runtime) {}},
		{name: "idle", edit: func(f *File) { f.Probes.Idle = Duration(time.Minute) }, want: func(s *Runtime) { s.ProbeIdle = time.Minute }},
		{name: "disabled", edit: func(f *File) { f.Probes.Disabled = true }, want: func(s *Runtime) { s.ProbeIdle = 0 }},
	})
}

func TestResolveAudit(t *testing.T) {
	testSection(t, resolveAudit, nil, []sectionCase{
		{name: "defaults", want: func(s *Runtime) { s.AuditDir, s.AuditMaxBytes = "/data/audit", 64<<20 }},
		{name: "set", edit: func(f *File) { f.Audit = AuditSection{Dir: "/var/audit", MaxFileMB: 2} },
			want: func(s *Runtime) { s.AuditDir, s.AuditMaxBytes = "/var/audit", 2<<20 }},
		{name: "disabled", edit: func(f *File) { f.Audit.Disabled = true }, want: func(*Runtime) {}},
		{name: "disabled with a dir", edit: func(f *File) { f.Audit = AuditSection{Dir: "/a", Disabled: true} },
			err: "audit.dir: is set but audit.disabled is true: remove one"},
		{name: "negative size", edit: func(f *File) { f.Audit.MaxFileMB = -1 }, err: "audit.max_file_mb: must not be negative"},
	})
}

func TestResolveJournal(t *testing.T) {
	testSection(t, resolveJournal, nil, []sectionCase{
		{name: "defaults", want: func(s *Runtime) { s.JournalDir, s.JournalFlush = "/data/journal", 100*time.Millisecond }},
		{name: "set", edit: func(f *File) { f.Journal = JournalSection{Dir: "/var/j", Flush: Duration(20 * time.Millisecond)} },
			want: func(s *Runtime) { s.JournalDir, s.JournalFlush = "/var/j", 20*time.Millisecond }},
		{name: "disabled", edit: func(f *File) { f.Journal.Disabled = true }, want: func(*Runtime) {}},
		{name: "disabled with a dir", edit: func(f *File) { f.Journal = JournalSection{Dir: "/j", Disabled: true} },
			err: "journal.dir: is set but journal.disabled is true: remove one"},
		{name: "negative flush", edit: func(f *File) { f.Journal.Flush = Duration(-time.Second) }, err: "journal.flush: must not be negative"},
		{name: "slow flush", edit: func(f *File) { f.Journal.Flush = Duration(2 * time.Second) },
			err: "journal.flush: 2s is longer than the request path may run ahead of the disk; at most 1s"},
	})
}

// limits.stored_responses_bytes is a size, 64MiB unless set.
func TestStoredResponsesBytesIsASize(t *testing.T) {
	for yaml, want := range map[string]int64{"": 64 << 20, "\nlimits: {stored_responses_bytes: 16MiB}\n": 16 << 20} {
		c, err := Parse([]byte(validConfig + yaml))
		if err != nil {
			t.Fatal(err)
		}
		s, err := Resolve(c, testEnvOf())
		if err != nil {
			t.Fatal(err)
		}
		if s.StoredResponsesBytes != want {
			t.Errorf("%q: %d bytes, want %d", yaml, s.StoredResponsesBytes, want)
		}
	}
	if _, err := Parse([]byte(validConfig + "\nlimits: {stored_responses_bytes: lots}\n")); err == nil || !strings.Contains(err.Error(), `"lots" is not a size`) {
		t.Fatalf("a bad size: %v", err)
	}
}
