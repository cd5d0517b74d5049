package config

import "testing"

func TestRestartField(t *testing.T) {
	for _, tc := range []struct {
		edit func(*File)
		want string
	}{
		{func(*File) {}, ""},
		{func(f *File) { f.Providers = []ProviderSection{{Name: "p"}} }, ""},
		{func(f *File) { f.Groups = []GroupSection{{Name: "auto"}} }, ""},
		{func(f *File) { f.Node.Voter = true }, "node.voter"},
		{func(f *File) { f.Node.Drain.Grace = 1 }, "node.drain"},
		{func(f *File) { f.Regions[0].Jurisdiction = "us" }, "regions"},
		{func(f *File) { f.Tenants = []TenantSection{{Name: "t"}} }, "tenants"},
		{func(f *File) { f.Limits.MaxMessages = 1 }, "limits.max_messages"},
		{func(f *File) { f.Timeouts.Connect = 1 }, "timeouts.connect"},
		{func(f *File) { f.Tracing.OTLPEndpoint = "http://c" }, "tracing.otlp_endpoint"},
	} {
		b := baseFile()
		tc.edit(b)
		if got := RestartField(baseFile(), b); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
	if RestartField(nil, baseFile()) != "" {
		t.Error("no previous file: nothing to compare")
	}
}
