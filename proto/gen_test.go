package proto

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedCodeIsCurrent regenerates the Go code from the .proto
// files and compares it with what is committed. It needs protoc and the two Go
// plugins (.ci/run installs them); without them it skips.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	gobin := filepath.Join(goEnv(t, "GOPATH"), "bin")
	path := os.Getenv("PATH") + string(os.PathListSeparator) + gobin
	for _, tool := range []string{"protoc", "protoc-gen-go", "protoc-gen-go-grpc"} {
		if _, err := lookPath(tool, path); err != nil {
			t.Skipf("%s is not installed (apt-get install protobuf-compiler; go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12 google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0)", tool)
		}
	}
	out := t.TempDir()
	cmd := exec.Command("protoc", "--go_out="+out, "--go_opt=paths=source_relative",
		"--go-grpc_out="+out, "--go-grpc_opt=paths=source_relative", "ledger.proto", "mesh.proto")
	cmd.Env = append(os.Environ(), "PATH="+path)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, b)
	}
	for _, f := range []string{"ledger.pb.go", "ledger_grpc.pb.go", "mesh.pb.go", "mesh_grpc.pb.go"} {
		want, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what the .proto files generate: run go generate ./proto/ and commit", f)
		}
	}
}

func goEnv(t *testing.T, key string) string {
	b, err := exec.Command("go", "env", key).Output()
	if err != nil {
		t.Fatal(err)
	}
	return string(bytes.TrimSpace(b))
}

func lookPath(tool, path string) (string, error) {
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, tool)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}
