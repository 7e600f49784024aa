package report

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/bcrypt"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The users file, a key of a mounted Secret:
//
//	users:
//	  - name: alice
//	    password_hash: $2y$10$…            # bcrypt (htpasswd -nbBC 10 alice PASSWORD)
//	    namespaces: [shop, payments]
//	  - name: oncall
//	    password_hash: sha256:9f86d0…      # hex sha256 of the password
//	    namespaces: ["*"]                  # every namespace
//
// spikehunt serve-clickhouse takes its two users' passwords in clear from
// environment variables; this server has any number of people, so it
// keeps only hashes, and a Secret that leaks gives away no password.
// bcrypt is the choice for passwords people pick; sha256 is for long
// random ones (a generated token), where a slow hash adds nothing.

// AllNamespaces in a user's namespaces grants every namespace.
const AllNamespaces = "*"

// maxUsersFileBytes bounds the users file.
const maxUsersFileBytes = 1 << 20

// minBcryptCost refuses hashes cheap enough to brute-force from a leaked
// Secret.
const minBcryptCost = 10

type usersFile struct {
	Users []userEntry `yaml:"users"`
}

type userEntry struct {
	Name         string   `yaml:"name"`
	PasswordHash string   `yaml:"password_hash"`
	Namespaces   []string `yaml:"namespaces"`
}

// user is one checked entry of the users file.
type user struct {
	name       string
	bcrypt     []byte // set for a bcrypt hash
	sha256     []byte // set for a sha256 hash
	namespaces []string
}

// Users are the people the server lets in, and where.
type Users struct {
	byName map[string]*user
	// verified caches, per user, the sha256 of the last password bcrypt
	// accepted, so that a browser's every request does not cost a bcrypt
	// comparison (tens of milliseconds of CPU).
	mu       sync.Mutex
	verified map[string][32]byte
}

// LoadUsers reads and checks a users file.
func LoadUsers(path string) (*Users, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("report server users file: %w", err)
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, maxUsersFileBytes+1)); err != nil {
		return nil, fmt.Errorf("report server users file %s: %w", path, err)
	}
	if buf.Len() > maxUsersFileBytes {
		return nil, fmt.Errorf("report server users file %s: over %d bytes", path, maxUsersFileBytes)
	}
	u, err := parseUsers(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("report server users file %s: %w", path, err)
	}
	return u, nil
}

// parseUsers checks a users file's bytes.
func parseUsers(b []byte) (*Users, error) {
	var uf usersFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&uf); err != nil {
		return nil, fmt.Errorf("%w (want users: a list of name, password_hash, namespaces)", err)
	}
	if len(uf.Users) == 0 {
		return nil, ErrNoUsers
	}
	out := &Users{byName: make(map[string]*user, len(uf.Users)), verified: map[string][32]byte{}}
	for i, e := range uf.Users {
		if e.Name == "" || strings.ContainsAny(e.Name, ":\x00\r\n") || len(e.Name) > 256 {
			return nil, fmt.Errorf("user %d: name %q: want 1–256 characters without ':' (basic auth splits there)", i+1, e.Name)
		}
		if out.byName[e.Name] != nil {
			return nil, fmt.Errorf("user %q is listed twice", e.Name)
		}
		u := &user{name: e.Name}
		switch h := e.PasswordHash; {
		case strings.HasPrefix(h, "sha256:"):
			sum, err := hex.DecodeString(strings.TrimPrefix(h, "sha256:"))
			if err != nil || len(sum) != sha256.Size {
				return nil, fmt.Errorf("user %q: password_hash sha256: wants 64 hex digits (printf %%s PASSWORD | sha256sum)", e.Name)
			}
			u.sha256 = sum
		case strings.HasPrefix(h, "$2"):
			cost, err := bcrypt.Cost([]byte(h))
			if err != nil {
				return nil, fmt.Errorf("user %q: password_hash: not a bcrypt hash: %v", e.Name, err)
			}
			if cost < minBcryptCost {
				return nil, fmt.Errorf("user %q: bcrypt cost %d, want at least %d (htpasswd -nbBC %d)", e.Name, cost, minBcryptCost, minBcryptCost)
			}
			u.bcrypt = []byte(h)
		case h == "":
			return nil, fmt.Errorf("user %q has no password_hash", e.Name)
		default:
			return nil, fmt.Errorf("user %q: password_hash must be bcrypt ($2y$…) or sha256:<hex>; a password in clear is not accepted", e.Name)
		}
		if len(e.Namespaces) == 0 {
			return nil, fmt.Errorf("user %q has no namespaces: list the namespaces whose captures they may open, or %q for all", e.Name, AllNamespaces)
		}
		for _, ns := range e.Namespaces {
			if ns != AllNamespaces && len(validation.IsDNS1123Label(ns)) > 0 {
				return nil, fmt.Errorf("user %q: namespace %q is not a namespace name", e.Name, ns)
			}
		}
		u.namespaces = slices.Clone(e.Namespaces)
		out.byName[e.Name] = u
	}
	return out, nil
}

// dummyBcrypt is compared against when the user is unknown, so that an
// unknown name takes as long to refuse as a wrong password.
var dummyBcrypt, _ = bcrypt.GenerateFromPassword([]byte("spikehunt report server: no such user"), minBcryptCost)

// Authenticate returns the user whose name and password these are, or
// false. Digests are compared in constant time.
func (us *Users) Authenticate(name, password string) (*user, bool) {
	u := us.byName[name]
	sum := sha256.Sum256([]byte(password))
	if u == nil {
		bcrypt.CompareHashAndPassword(dummyBcrypt, []byte(password))
		return nil, false
	}
	if u.sha256 != nil {
		return u, subtle.ConstantTimeCompare(sum[:], u.sha256) == 1
	}
	us.mu.Lock()
	last, ok := us.verified[name]
	us.mu.Unlock()
	if ok && subtle.ConstantTimeCompare(sum[:], last[:]) == 1 {
		return u, true
	}
	if bcrypt.CompareHashAndPassword(u.bcrypt, []byte(password)) != nil {
		return nil, false
	}
	us.mu.Lock()
	us.verified[name] = sum
	us.mu.Unlock()
	return u, true
}

// may reports whether u may open captures of namespace ns.
func (u *user) may(ns string) bool {
	return slices.Contains(u.namespaces, AllNamespaces) || slices.Contains(u.namespaces, ns)
}
