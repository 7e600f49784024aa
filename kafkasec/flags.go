package kafkasec

import "flag"

// Flags are the command-line flags of a Config, the same in every binary
// under a prefix of its own ("kafka." gives --kafka.tls.ca-file). There is
// no password flag: a command line is visible to every user of the host.
type Flags struct {
	prefix string
	v      Config
}

// AddFlags defines the flags on fs with def's values as defaults.
func AddFlags(fs *flag.FlagSet, prefix string, def Config) *Flags {
	f := &Flags{prefix: prefix, v: def}
	p := prefix
	fs.BoolVar(&f.v.TLS.Enabled, p+"tls.enabled", def.TLS.Enabled, "dial the Kafka brokers with TLS (an SSL or SASL_SSL listener)")
	fs.StringVar(&f.v.TLS.CAFile, p+"tls.ca-file", def.TLS.CAFile, "PEM file of the CAs of the brokers' certificates (empty: the system's roots)")
	fs.StringVar(&f.v.TLS.CertFile, p+"tls.cert-file", def.TLS.CertFile, "PEM client certificate for brokers that authenticate clients by certificate (mTLS), with --"+p+"tls.key-file")
	fs.StringVar(&f.v.TLS.KeyFile, p+"tls.key-file", def.TLS.KeyFile, "PEM key of --"+p+"tls.cert-file")
	fs.StringVar(&f.v.TLS.ServerName, p+"tls.server-name", def.TLS.ServerName, "name the brokers' certificates must carry (empty: each broker's host)")
	fs.BoolVar(&f.v.TLS.DangerousSkipVerify, p+"tls.dangerous-skip-verify", def.TLS.DangerousSkipVerify, "DANGEROUS: accept any broker certificate; anyone on the path can read and forge the connection, password included")
	fs.StringVar(&f.v.SASL.Mechanism, p+"sasl.mechanism", def.SASL.Mechanism, "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: no SASL)")
	fs.StringVar(&f.v.SASL.Username, p+"sasl.username", def.SASL.Username, "SASL user")
	fs.StringVar(&f.v.SASL.UsernameFile, p+"sasl.username-file", def.SASL.UsernameFile, "file holding the SASL user, instead of --"+p+"sasl.username")
	fs.StringVar(&f.v.SASL.PasswordFile, p+"sasl.password-file", def.SASL.PasswordFile, "file holding the SASL password (a mounted Secret), read at every new connection")
	return f
}

// Config is the flags' values (their defaults where not given).
func (f *Flags) Config() Config { return f.v }

// Apply sets in c the fields whose flags were given on fs, so that they
// override a config file and the others keep its values.
func (f *Flags) Apply(fs *flag.FlagSet, c *Config) {
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case f.prefix + "tls.enabled":
			c.TLS.Enabled = f.v.TLS.Enabled
		case f.prefix + "tls.ca-file":
			c.TLS.CAFile = f.v.TLS.CAFile
		case f.prefix + "tls.cert-file":
			c.TLS.CertFile = f.v.TLS.CertFile
		case f.prefix + "tls.key-file":
			c.TLS.KeyFile = f.v.TLS.KeyFile
		case f.prefix + "tls.server-name":
			c.TLS.ServerName = f.v.TLS.ServerName
		case f.prefix + "tls.dangerous-skip-verify":
			c.TLS.DangerousSkipVerify = f.v.TLS.DangerousSkipVerify
		case f.prefix + "sasl.mechanism":
			c.SASL.Mechanism = f.v.SASL.Mechanism
		case f.prefix + "sasl.username":
			c.SASL.Username = f.v.SASL.Username
		case f.prefix + "sasl.username-file":
			c.SASL.UsernameFile = f.v.SASL.UsernameFile
		case f.prefix + "sasl.password-file":
			c.SASL.PasswordFile = f.v.SASL.PasswordFile
		}
	})
}
