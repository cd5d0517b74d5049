// Package deploy is how operators run llmesh: the image built FROM
// scratch (docker/), a three-region mesh for Docker Compose (compose/),
// Kubernetes manifests (k8s/), a systemd unit (systemd/), and a Grafana
// dashboard with Prometheus alert rules (monitoring/). It has no code of
// its own: its tests check those files against the node (configurations
// that load, metrics that exist, manifests that decode as Kubernetes
// objects) and, where a Docker engine runs, the mesh across containers
// with real network cuts, kills and stops.
package deploy
