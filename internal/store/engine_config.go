package store

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The engine's own access control is what keeps a query inside the data
// directory: without a users configuration, libchdb runs every statement as
// a user with every grant, so file(), url(), remote(), s3() and the
// matching table engines read and write anything the process can reach.
// OpenEmbedded therefore always boots the engine with a configuration of
// its own (also so that a config.xml in the working directory, which the
// engine would otherwise load, cannot change it).

// engineGrants is everything the store, the migrations, the ingest and the
// detectors use. It leaves out on purpose: the SOURCES (FILE, URL, REMOTE,
// S3, HDFS, MYSQL, POSTGRES, SQLITE, ODBC, JDBC, MONGO, REDIS, AZURE, ...),
// CREATE DICTIONARY (a dictionary's source reaches files and hosts), the
// table engines that need a source grant, BACKUP/RESTORE, SYSTEM (but for
// merges and replica syncs), introspection and access management.
const engineGrants = "SELECT, INSERT, ALTER, CREATE DATABASE, CREATE TABLE, CREATE VIEW, CREATE TEMPORARY TABLE, " +
	"DROP DATABASE, DROP TABLE, DROP VIEW, TRUNCATE, OPTIMIZE, SHOW, KILL QUERY, SYSTEM SYNC REPLICA, SYSTEM MERGES"

// fileSettings name a server-side file a query could have the engine read
// or write (a Template format's row and result-set files, a schema file);
// they are fixed at their defaults.
//
// merge_tree_disk and merge_tree_storage_policy are a table's disk
// (constraints name MergeTree settings with the merge_tree_ prefix):
// SETTINGS disk = disk(type = 'web', endpoint = …) would make the engine
// connect to any host, and a local one write anywhere.
var fileSettings = []string{"format_schema", "format_template_row", "format_template_resultset", "output_format_schema", "format_schema_source",
	"merge_tree_disk", "merge_tree_storage_policy"}

// MinFreeDiskRatio is the share of the data's volume the engine keeps
// free: an insert that finds less free is refused (NOT_ENOUGH_SPACE), as
// a whole, before it writes anything. Writes the engine begins on a
// volume that then runs out can leave parts it committed but cannot read
// (docs/store-care.md); the headroom keeps the store's own growth from
// getting there, and leaves room for merges and for the care's repairs.
// The ingest retries a refused batch, so nothing is lost meanwhile.
const MinFreeDiskRatio = 0.02

// writeEngineConfig writes the engine's config.xml and users.xml under
// dir/spikehunt-engine and returns the config file's path.
func writeEngineConfig(dir string, externalSources bool) (string, error) {
	cdir := filepath.Join(dir, "spikehunt-engine")
	if err := os.MkdirAll(cdir, 0o700); err != nil {
		return "", fmt.Errorf("embedded store: create the engine's config folder: %w", err)
	}
	users := filepath.Join(cdir, "users.xml")
	config := filepath.Join(cdir, "config.xml")
	var grants, constraints, hosts strings.Builder
	if !externalSources {
		fmt.Fprintf(&grants, "<grants><query>GRANT %s ON *.*</query></grants>", engineGrants)
		constraints.WriteString("<constraints>")
		for _, s := range fileSettings {
			fmt.Fprintf(&constraints, "<%s><const/></%s>", s, s)
		}
		constraints.WriteString("</constraints>")
		// A second lock on url(), remote() and the like: no host matches.
		hosts.WriteString("<remote_url_allow_hosts><host>spikehunt.invalid</host></remote_url_allow_hosts>")
	}
	usersXML := "<clickhouse>\n<profiles><default>" + constraints.String() + "</default></profiles>\n" +
		"<users><default><password></password><networks><ip>::/0</ip></networks><profile>default</profile><quota>default</quota>" +
		grants.String() + "</default></users>\n<quotas><default></default></quotas>\n</clickhouse>\n"
	// executable() runs scripts only from user_scripts_path: a folder that
	// does not exist.
	configXML := "<clickhouse>\n<users_config>" + xmlText(users) + "</users_config>\n" + hosts.String() +
		"\n<user_scripts_path>" + xmlText(filepath.Join(cdir, "no-scripts")) + "/</user_scripts_path>\n" +
		fmt.Sprintf("<merge_tree><min_free_disk_ratio_to_perform_insert>%g</min_free_disk_ratio_to_perform_insert></merge_tree>\n", MinFreeDiskRatio) +
		"</clickhouse>\n"
	for path, body := range map[string]string{users: usersXML, config: configXML} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			return "", fmt.Errorf("embedded store: write the engine's %s: %w", filepath.Base(path), err)
		}
	}
	return config, nil
}

func xmlText(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s)) // writes to memory: cannot fail
	return b.String()
}
