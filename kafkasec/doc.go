// Package kafkasec is the connection security of spikehunt's four Kafka
// clients (the agent's exporter, ingest, the detector's alerts, the
// operator's alert intake): TLS (a CA, an optional client certificate, the
// server name) and SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), as one
// Config with the same flags in every binary (AddFlags) and franz-go
// options (Config.Options).
//
// Credentials come from files only, a mounted Kubernetes Secret: there is
// no password field or flag. The password file and the client certificate
// are read again at every new connection, so a rotated Secret is used
// without a restart; the CA is read once, at Options.
//
// franz-go retries a refused connection (a bad password, a certificate
// that does not verify) like a broker that is down, so a client only ever
// sees its deadline pass. Check asks for metadata once, which returns the
// refusal itself, and says what to fix; binaries call it at start and exit
// when it matches ErrRefused. RefusalLog logs a refusal that comes later
// (a credential rotated at the broker first) once a minute.
//
// It imports franz-go and the standard library only, so that the agent
// (which must not import pipelines/), the pipelines and the operator may
// all import it (ARCHITECTURE.md).
package kafkasec
