// Package alertdoc is the detector's alert document, spikehunt.alert/v1,
// declared once: the detector writes it (pipelines/services/alerts), the
// operator reads it (operator/internal/alertintake), and schema.md and
// alert.schema.json describe it to everyone else. Within a version fields
// may be added, never renamed or retyped; anything a v1 reader would
// misread is a new SchemaVersion.
package alertdoc
