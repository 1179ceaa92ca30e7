package auth

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"

	"golang.org/x/crypto/argon2"
)

// HashParams are argon2id's cost parameters.
type HashParams struct {
	// Memory is in KiB.
	Memory uint32
	// Time is the number of passes.
	Time uint32
	// Threads is the degree of parallelism.
	Threads uint8
}

// DefaultHashParams follow OWASP's argon2id recommendation (19 MiB, 2 passes, 1 thread).
var DefaultHashParams = HashParams{Memory: 19 * 1024, Time: 2, Threads: 1}

// TestHashParams are cheap parameters for tests only.
var TestHashParams = HashParams{Memory: 1024, Time: 1, Threads: 1}

const hashLen = 32

var b64 = base64.RawStdEncoding

// HashPassword returns the argon2id PHC string of password with a fresh random salt.
func HashPassword(password string, p HashParams) string {
	salt := make([]byte, 16)
	_, _ = rand.Read(salt)
	key := argon2.IDKey([]byte(password), salt, p.Time, p.Memory, p.Threads, hashLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, p.Memory, p.Time, p.Threads,
		b64.EncodeToString(salt), b64.EncodeToString(key))
}

// CheckPassword reports whether password matches the PHC string encoded, in constant time.
func CheckPassword(encoded, password string) bool {
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false
	}
	var v int
	var p HashParams
	if _, err := fmt.Sscanf(parts[2], "v=%d", &v); err != nil || v != argon2.Version {
		return false
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.Memory, &p.Time, &p.Threads); err != nil {
		return false
	}
	salt, err := b64.DecodeString(parts[4])
	if err != nil {
		return false
	}
	want, err := b64.DecodeString(parts[5])
	if err != nil || len(want) == 0 || len(want) > 1024 {
		return false
	}
	got := argon2.IDKey([]byte(password), salt, p.Time, p.Memory, p.Threads, uint32(len(want))) //nolint:gosec // at most 1024, checked above
	return subtle.ConstantTimeCompare(got, want) == 1
}

// GeneratePassword returns a random password of five groups of five base32 characters (125 bits).
func GeneratePassword() string {
	t := rand.Text()
	return t[0:5] + "-" + t[5:10] + "-" + t[10:15] + "-" + t[15:20] + "-" + t[20:25]
}

func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
