#!/bin/sh
# Builds the llmesh image FROM scratch around a static binary built here:
# no image is pulled, so it works with an engine that reaches no registry.
#
#   deploy/docker/build.sh [TAG]      # default llmesh:dev
set -eu
cd "$(dirname "$0")/../.."
tag=${1:-llmesh:dev}
certs=${CA_CERTIFICATES:-/etc/ssl/certs/ca-certificates.crt}
if [ ! -r "$certs" ]; then
  echo "build.sh: no CA bundle at $certs (apt-get install ca-certificates, or set CA_CERTIFICATES)" >&2
  exit 1
fi
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
version=$(git describe --always --dirty 2>/dev/null || echo dev)
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$ctx/llmesh" ./cmd/llmesh
cp "$certs" "$ctx/ca-certificates.crt"
mkdir -p "$ctx/data" "$ctx/tmp"
chmod 1777 "$ctx/tmp"
cp deploy/docker/Dockerfile "$ctx/Dockerfile"
docker build -q -t "$tag" --label "org.opencontainers.image.version=$version" "$ctx" >/dev/null
echo "$tag ($version)"
