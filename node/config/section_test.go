package config

import (
	"errors"
	"io/fs"
	"reflect"
	"testing"
)

// sectionCase is one case of a section's table: an edit of baseFile, and
// either what the section then adds to the Runtime or its exact error.
type sectionCase struct {
	name string
	edit func(*File)
	// want applies to a Runtime what the section is expected to add; nil
	// when the case is about the error only.
	want func(*Runtime)
	// err is the section's whole error, "" for none.
	err string
}

// baseFile is a small valid file: a node in eu-west of two regions.
func baseFile() *File {
	return &File{
		Node:    NodeSection{Name: "eu-1", Region: "eu-west", DataDir: "/data"},
		Regions: []RegionSection{{Name: "eu-west", Jurisdiction: "eu"}, {Name: "us-east", Jurisdiction: "us"}},
	}
}

// sectionEnv holds the variables and files the section tables read.
func sectionEnv() Env {
	vars := map[string]string{"ADMIN": "admin-secret", "KEY": "provider-secret",
		"GOSSIP_KEY": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}
	return Env{
		Getenv: func(k string) string { return vars[k] },
		ReadFile: func(name string) ([]byte, error) {
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
		},
		PrivateIP: func() (string, error) { return "10.1.2.3", nil },
	}
}

// runSections runs secs on f, returning the Runtime and the last
// section's problems.
func runSections(f *File, env Env, secs ...section) (*Runtime, error) {
	s := defaultRuntime(f.Node.Name, f.Node.Region)
	var p problems
	for i, sec := range secs {
		if i == len(secs)-1 {
			p = nil
		}
		sec(f, env, s, &p)
	}
	return s, p.err()
}

// testSection runs sec, after the sections it reads (pre), on each case's
// file: the Runtime must be what pre made of it plus the case's want, and
// the error exactly the case's.
func testSection(t *testing.T, sec section, pre []section, cases []sectionCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := baseFile()
			if tc.edit != nil {
				tc.edit(f)
			}
			env := sectionEnv()
			got, err := runSections(f, env, append(append([]section{}, pre...), sec)...)
			if msg := errString(err); msg != tc.err {
				t.Fatalf("error:\n got %q\nwant %q", msg, tc.err)
			}
			if tc.want == nil {
				return
			}
			want, _ := runSections(f, env, append(append([]section{}, pre...), func(*File, Env, *Runtime, *problems) {})...)
			tc.want(want)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("runtime:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestPrivateIPErrorIsReported(t *testing.T) {
	f := baseFile()
	f.Node.Advertise = "auto"
	env := sectionEnv()
	env.PrivateIP = func() (string, error) { return "", errors.New("no interface") }
	if _, err := runSections(f, env, resolvePeers); errString(err) != "node.advertise: auto: no interface" {
		t.Fatalf("got %v", err)
	}
}
