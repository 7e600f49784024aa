// Package vocab holds the words every product shares, declared once: the
// detector's pattern classes, the capture backends, the store's table
// names and the Grafana data source's identity. Values here are on the
// wire or in the store, so a change is a compatibility change: add words,
// never rename them.
package vocab
