// Package report serves capture artifacts to browsers: the Grafana
// Captures dashboard links each capture to
// GET /captures/{namespace}/{name}/report, its node-made report.html, and
// GET /captures/{namespace}/{name}/files/{file} to its other files.
//
// A Server looks the Capture up in the Kubernetes API, finds its artifact
// in the agents' store, and either streams the file after checking its
// sha256 against the artifact's record (ModeProxy) or redirects to a
// presigned S3 URL for that one object (ModeRedirect). Every request is
// authenticated (HTTP basic auth against a users file of password hashes)
// and each user is limited to namespaces; a Server is never built without
// users.
//
// The store is reached through Artifacts, which operator/cmd implements
// over internal/capture/artifact (the one place the operator may import
// it). The operator's store credentials never leave the process: a
// browser gets bytes, or a URL that grants GET of one object until it
// expires.
//
// Lifecycle: New listens at once (a taken port fails the start); Start
// serves until its context ends and then closes the listener; a Server
// that is never started must be closed with Close. Proxy mode holds a
// file being checked in memory (up to 1 MiB) or in a temporary file of
// Config.SpoolDir, removed when the request ends.
package report
