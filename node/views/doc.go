// Package views holds the JSON views the admin API serves and
// `llmesh` prints: a node's status, the mesh's members and providers,
// budgets, tenants, routing decisions and explanations. They are plain
// data, their JSON field names part of the API; the node fills them in.
//
// The package imports no project package.
package views
